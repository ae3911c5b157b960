package routing

import "github.com/prometheus/client_golang/prometheus"

// Reasons a routing write was refused.
const (
	reasonLapsed     = "lapsed"
	reasonNewerToken = "newer_token"
)

// Reasons a routing object's fencing token was overwritten as written by no
// term of the Lease.
const (
	// reasonAboveLease: above the highest token this process has seen on
	// the Lease and the Lease's token now.
	reasonAboveLease = "above_lease"
	// reasonMalformed: not a decimal number in the Lease's int32 range.
	reasonMalformed = "malformed"
)

// Metrics are the router's Prometheus collectors. The caller adds the lease
// and lease_namespace labels when it registers them.
type Metrics struct {
	writes    prometheus.Counter
	conflicts prometheus.Counter
	refused   *prometheus.CounterVec
	// overridden is kept apart from refused: those writes were not sent,
	// these were sent over a token no term wrote, and only these mean that
	// someone wrote the routing outside every term.
	overridden *prometheus.CounterVec
	errors     prometheus.Counter
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
		overridden: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_route_overridden_total", ConstLabels: labels,
			Help: "Routing decisions that overwrite a fencing token no term of the Lease wrote: above every token of the Lease (reason above_lease), or not a token (reason malformed). Counted each time the leader meets it, until overwritten.",
		}, []string{"reason"}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_route_errors_total", ConstLabels: labels,
			Help: "Routing reconciliations that failed and are retried with backoff.",
		}),
	}
}

// Collectors returns the collectors to register.
func (m *Metrics) Collectors() []prometheus.Collector {
	// Every reason is exported from the start, at zero.
	m.refused.WithLabelValues(reasonLapsed)
	m.refused.WithLabelValues(reasonNewerToken)
	m.overridden.WithLabelValues(reasonAboveLease)
	m.overridden.WithLabelValues(reasonMalformed)
	return []prometheus.Collector{m.writes, m.conflicts, m.refused, m.overridden, m.errors}
}
