package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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

// newMetrics registers the Go runtime's, the process's and client-go's
// collectors, without labels of ours: they describe the process, not the
// Lease.
func newMetrics(cfg Config) (*metrics, error) {
	registry := prometheus.NewRegistry()
	clientGo, err := clientGoCollectors()
	if err != nil {
		return nil, err
	}
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
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
