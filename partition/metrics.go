package partition

import "github.com/prometheus/client_golang/prometheus"

// metrics are the group's Prometheus collectors. The gauges are computed
// when scraped from the same time-bounded view the API reports. The caller
// adds the lease and namespace labels when it registers them.
type metrics struct {
	rebalances prometheus.Counter
	assignment prometheus.Gauge
	collectors []prometheus.Collector
}

func newMetrics(m *Member) *metrics {
	mt := &metrics{
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_partition_rebalances_total",
			Help: "Partitions this pod handed over because it owned more than its fair share.",
		}),
		assignment: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_elector_partition_assignment_seconds",
			Help: "Time from the last change of members this pod saw to the first full and fair assignment it saw after it.",
		}),
	}
	mt.collectors = []prometheus.Collector{
		mt.rebalances,
		mt.assignment,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partitions_owned",
			Help: "Partitions this pod owns (time-bounded, as in GET /partitions).",
		}, func() float64 { return float64(len(m.assess().mine)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partition_members",
			Help: "Live members of the group as this pod sees them.",
		}, func() float64 { return float64(len(m.assess().members)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partitions",
			Help: "Partitions in the group (--partitions).",
		}, func() float64 { return float64(len(m.partitions)) }),
	}
	return mt
}

// Collectors returns the group's Prometheus collectors.
func (m *Member) Collectors() []prometheus.Collector { return m.metrics.collectors }
