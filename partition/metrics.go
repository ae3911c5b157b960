package partition

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/ownership"
)

// metrics are the group's Prometheus collectors. The gauges are computed
// when scraped from the same time-bounded view the API reports. The caller
// adds the lease (the group's name) and lease_namespace labels when it
// registers them. Every name starts with leader_elector_partition_. The
// series are this member's aggregates, not one per partition: that keeps
// their number fixed whatever --partitions is; client-go's
// leader_election_master_status{name} has one series per Lease this pod
// runs an elector on.
type metrics struct {
	rebalances         prometheus.Counter
	assignment         prometheus.Histogram
	checkpoints        *prometheus.CounterVec
	checkpointDuration prometheus.Histogram
	collectors         []prometheus.Collector
}

// Results of a checkpoint request, the values of
// leader_elector_partition_checkpoints_total's result label.
const (
	checkpointStored      = "stored"
	checkpointRefused     = "refused"
	checkpointRateLimited = "rate-limited"
	checkpointInvalid     = "invalid"
	checkpointFailed      = "failed"
)

// observeCheckpoint counts one checkpoint request by its result.
func (mt *metrics) observeCheckpoint(err error) {
	var limited *ownership.RateLimitedError
	result := checkpointFailed
	switch {
	case err == nil:
		result = checkpointStored
	case errors.As(err, &limited):
		result = checkpointRateLimited
	case errors.Is(err, ownership.ErrNotOwned), errors.Is(err, ownership.ErrCheckpointRefused):
		result = checkpointRefused
	case errors.Is(err, ownership.ErrOutOfRange), errors.Is(err, ownership.ErrCheckpointTooLarge), errors.Is(err, ownership.ErrCheckpointNotText):
		result = checkpointInvalid
	}
	mt.checkpoints.WithLabelValues(result).Inc()
}

func newMetrics(m *Member) *metrics {
	mt := &metrics{
		rebalances: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leader_elector_partition_rebalances_total",
			Help: "Partitions this pod handed over because it owned more than its fair share or they were beyond the group's effective partition count.",
		}),
		// A histogram, not the last value: a slow rebalance between two
		// scrapes stays visible, and the rate of slow ones can be alerted on.
		assignment: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leader_elector_partition_assignment_duration_seconds",
			Help:    "Time from a change of members this pod saw to the first full and fair assignment it saw after it.",
			Buckets: []float64{.5, 1, 2.5, 5, 10, 15, 30, 60, 120, 300},
		}),
	}
	mt.checkpoints = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_elector_partition_checkpoints_total",
		Help: "PUT /partitions/<i>/checkpoint requests, by result: stored, refused (not owned, claim expired, term changed), rate-limited, invalid, failed (the API server).",
	}, []string{"result"})
	for _, r := range []string{checkpointStored, checkpointRefused, checkpointRateLimited, checkpointInvalid, checkpointFailed} {
		mt.checkpoints.WithLabelValues(r)
	}
	mt.checkpointDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "leader_elector_partition_checkpoint_duration_seconds",
		Help:    "Duration of the Lease writes of stored checkpoints (one update request each).",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	})
	mt.collectors = []prometheus.Collector{
		mt.rebalances,
		mt.assignment,
		mt.checkpoints,
		mt.checkpointDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partition_owned",
			Help: "Partitions this pod owns (time-bounded, as in GET /partitions).",
		}, func() float64 { return float64(len(m.assess().mine)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partition_members",
			Help: "Live members of the group as this pod sees them.",
		}, func() float64 { return float64(len(m.assess().members)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partition_configured",
			Help: "Partitions in the group (--partitions).",
		}, func() float64 { return float64(len(m.partitions)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "leader_elector_partition_effective",
			Help: "Partitions the group works with: the smallest --partitions among its live members (as effectivePartitions in GET /partitions).",
		}, func() float64 { return float64(m.assess().effective) }),
	}
	return mt
}

// Collectors returns the group's Prometheus collectors.
func (m *Member) Collectors() []prometheus.Collector { return m.metrics.collectors }
