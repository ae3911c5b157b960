package app

import (
	"fmt"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
)

// metrics is the sidecar's one registry, served on /metrics.
type metrics struct {
	registry *prometheus.Registry
	// own registers the project's leader_elector_* series, with the Lease's
	// name and namespace as the labels lease and lease_namespace. Not
	// "namespace": Prometheus' Kubernetes discovery and the Prometheus
	// Operator attach the pod's namespace as that target label, and a
	// series' own would be renamed exported_namespace. In partition mode
	// the Lease is the group's name (--election): the group's series are
	// per member, not per partition.
	own prometheus.Registerer
}

// newMetrics registers the Go runtime's, the process's, client-go's and the
// build's collectors, without labels of ours: they describe the process,
// not the Lease.
func newMetrics(cfg Config) (*metrics, error) {
	registry := prometheus.NewRegistry()
	clientGo, err := clientGoCollectors()
	if err != nil {
		return nil, err
	}
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo(cfg.Version, cfg.Revision),
	}, clientGo...)
	for _, c := range all {
		if err := registry.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	own := prometheus.WrapRegistererWith(prometheus.Labels{
		"lease":           cfg.Election.Name,
		"lease_namespace": cfg.Election.Namespace,
	}, registry)
	return &metrics{registry: registry, own: own}, nil
}

// registerOwn registers the workload's leader_elector_* collectors.
func (m *metrics) registerOwn(cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := m.own.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// buildInfo is leader_elector_build_info, a gauge of 1 labelled by the
// build, in the shape of Prometheus' <program>_build_info: during a
// rollout, `* on (namespace, pod) group_left (version)
// leader_elector_build_info` says which version each pod runs. Written
// here rather than taken from client_golang's collectors/version: that one
// reads prometheus/common/version's package variables, which only -ldflags
// on that package set, while the binary's version is main.version, handed
// in through Config; its branch, goos, goarch and tags labels would be
// empty or say what go_info and the image already do. The revision falls
// back to the one Go stamps into a binary built in a git checkout (the
// image is built without .git and is given it by -ldflags).
func buildInfo(ver, revision string) prometheus.Collector {
	if ver == "" {
		ver = "unknown"
	}
	if revision == "" {
		revision = version.GetRevision()
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "leader_elector_build_info",
		Help: "A metric with a constant '1' value labelled by the version, revision and goversion from which leader-elector was built.",
		ConstLabels: prometheus.Labels{
			"version":   ver,
			"revision":  revision,
			"goversion": runtime.Version(),
		},
	}, func() float64 { return 1 })
}
