package election

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/leadership"
)

// metrics are the election's Prometheus collectors. The gauges are computed
// when scraped, from the same time-bounded state the API reports, so a
// scrape never shows a lapsed leader as leading. The caller adds the lease
// and lease_namespace labels when it registers them.
type metrics struct {
	renewDuration prometheus.Histogram
	collectors    []prometheus.Collector
}

func newMetrics(t *tracker) *metrics {
	m := &metrics{
		renewDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leader_elector_renew_duration_seconds",
			Help:    "Duration of this pod's successful writes of the Lease (acquisitions and renewals).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	transitions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_elector_transitions_total",
		Help: "This pod's own changes of leadership, by reason: \"acquired\" counts the terms it began, every other reason the terms that ended for it.",
	}, []string{"reason"})
	for _, r := range leadership.Reasons {
		transitions.WithLabelValues(string(r))
	}
	t.onTransition = func(c leadership.Change) { transitions.WithLabelValues(string(c.Reason)).Inc() }
	m.collectors = []prometheus.Collector{
		m.renewDuration,
		transitions,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_is_leader",
			Help: "1 while this pod is the leader (time-bounded, as isLeader in the API), else 0.",
		}, func() float64 { return boolFloat(t.Snapshot().IsLeader) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_fencing_token",
			Help: "The Lease's leaseTransitions for the current holder's term.",
		}, func() float64 { return float64(t.Snapshot().FencingToken) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "leader_elector_leader_changes_total",
			Help: "Lease terms observed by this pod: each new holder or new fencing token counts once.",
		}, func() float64 { return float64(t.termsObserved()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_last_renew_timestamp_seconds",
			Help: "Unix time of this pod's last successful write of the Lease; 0 if it never wrote it.",
		}, func() float64 {
			last := t.lastRenewTime()
			if last.IsZero() {
				return 0
			}
			return float64(last.UnixNano()) / 1e9
		}),
	}
	return m
}

func (m *metrics) observeRenewal(d time.Duration) {
	m.renewDuration.Observe(d.Seconds())
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
