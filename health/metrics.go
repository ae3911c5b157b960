package health

import "github.com/prometheus/client_golang/prometheus"

// metrics are health gating's Prometheus collectors; the caller adds the
// lease and lease_namespace labels when it registers them.
type metrics struct {
	healthy    prometheus.Gauge
	degraded   prometheus.Gauge
	probes     *prometheus.CounterVec
	collectors []prometheus.Collector
}

func newMetrics() *metrics {
	m := &metrics{
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_elector_app_healthy",
			Help: "1 while the app's health probe counts it healthy (this pod campaigns), else 0.",
		}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leader_elector_degraded",
			Help: "1 while this pod reports degraded in its API: it leads with an unhealthy app because no other candidate is healthy, else 0.",
		}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_app_health_probes_total",
			Help: "Probes of the app's health endpoint, by result (success, failure).",
		}, []string{"result"}),
	}
	// Both results exist from the start, so that rate() works at once.
	m.probes.WithLabelValues("success")
	m.probes.WithLabelValues("failure")
	m.collectors = []prometheus.Collector{m.healthy, m.degraded, m.probes}
	return m
}

func (m *metrics) observe(ok bool) {
	if ok {
		m.probes.WithLabelValues("success").Inc()
		return
	}
	m.probes.WithLabelValues("failure").Inc()
}

func (m *metrics) setHealthy(ok bool) { m.healthy.Set(boolFloat(ok)) }

func (m *metrics) setDegraded(on bool) { m.degraded.Set(boolFloat(on)) }

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
