package health

import "github.com/prometheus/client_golang/prometheus"

// metrics are health gating's Prometheus collectors; the caller adds the
// lease and lease_namespace labels when it registers them.
type metrics struct {
	healthy    prometheus.Gauge
	probes     *prometheus.CounterVec
	collectors []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_elector_app_healthy",
			Help: "1 while the app's health probe counts it healthy (this pod campaigns), else 0.",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_app_health_probes_total",
			Help: "Probes of the app's health endpoint, by result (success, failure).",
		}, []string{"result"}),
	}
	// Both results exist from the start, so that rate() works at once.
	m.probes.WithLabelValues("success")
	m.probes.WithLabelValues("failure")
	m.collectors = []prometheus.Collector{m.healthy, m.probes}
	return m
}

func (m *metrics) observe(ok bool) {
	if ok {
		m.probes.WithLabelValues("success").Inc()
		return
	}
	m.probes.WithLabelValues("failure").Inc()
}

func (m *metrics) setHealthy(ok bool) {
	v := 0.0
	if ok {
		v = 1
	}
	m.healthy.Set(v)
}
