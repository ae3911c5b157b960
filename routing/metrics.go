package routing

import "github.com/prometheus/client_golang/prometheus"

// Reasons a routing write was refused.
const (
	reasonLapsed     = "lapsed"
	reasonNewerToken = "newer_token"
)

// Metrics are the router's Prometheus collectors. The caller adds the lease
// and lease_namespace labels when it registers them.
type Metrics struct {
	writes    prometheus.Counter
	conflicts prometheus.Counter
	refused   *prometheus.CounterVec
	errors    prometheus.Counter
}

func newMetrics(mode Mode) *Metrics {
	labels := prometheus.Labels{"route": string(mode)}
	return &Metrics{
		writes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_route_writes_total", ConstLabels: labels,
			Help: "Successful writes of the routing objects (EndpointSlice or pod labels).",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_route_conflicts_total", ConstLabels: labels,
			Help: "Routing writes refused by the API server's resourceVersion precondition; the object is read again.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_route_fenced_total", ConstLabels: labels,
			Help: "Routing writes this pod refused to send: its claim had lapsed (reason lapsed), or a newer term had written the object (reason newer_token).",
		}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_route_errors_total", ConstLabels: labels,
			Help: "Routing reconciliations that failed and are retried with backoff.",
		}),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	// Both reasons are exported from the start, at zero.
	m.refused.WithLabelValues(reasonLapsed)
	m.refused.WithLabelValues(reasonNewerToken)
	return []prometheus.Collector{m.writes, m.conflicts, m.refused, m.errors}
}
