package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics is the sidecar's one registry, served on /metrics.
type metrics struct {
	registry *prometheus.Registry
	// labelled registers with the Lease's name and namespace as labels.
	labelled prometheus.Registerer
}

// newMetrics registers the Go runtime's and the process's collectors and
// the workload's.
func newMetrics(cfg Config, workload []prometheus.Collector) (*metrics, error) {
	registry := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"lease": cfg.Election.Name, "namespace": cfg.Election.Namespace}, registry)
	all := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, workload...)
	for _, c := range all {
		if err := labelled.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return &metrics{registry: registry, labelled: labelled}, nil
}
