package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/partition"
	"github.com/leader-elector/leader-elector/routing"
)

// workload is what run serves: leader election on one Lease, or, with
// --partitions, a member of a partition group.
type workload struct {
	run        func(context.Context) error
	elector    *election.Elector // leader election only (--route publishes its leadership)
	collectors []prometheus.Collector
	api        http.Handler
	probes     func(prometheus.Gatherer) http.Handler
}

// newWorkload builds what run serves; events, if not nil, records the
// Lease's Events in leader election.
func newWorkload(opts *options, requests, watches kubernetes.Interface, serverClock *election.ServerClock, events *election.EventRecorder) (*workload, error) {
	readiness := httpapi.Readiness(opts.Readiness)
	if opts.Partitions > 0 {
		cfg := opts.partitionConfig()
		cfg.Client, cfg.WatchClient, cfg.ServerClock = requests, watches, serverClock
		m, err := partition.New(cfg)
		if err != nil {
			return nil, err
		}
		return &workload{
			run:        m.Run,
			collectors: m.Collectors(),
			api:        httpapi.NewPartitionsAPIHandler(m, httpapi.APIOptions{}),
			probes: func(g prometheus.Gatherer) http.Handler {
				return httpapi.NewPartitionsProbeHandler(m, readiness, g)
			},
		}, nil
	}
	cfg := opts.electionConfig()
	cfg.Client, cfg.WatchClient, cfg.ServerClock = requests, watches, serverClock
	if events != nil {
		// Not a nil *EventRecorder in the interface: client-go checks for nil.
		cfg.Events = events
	}
	elector, err := election.New(cfg)
	if err != nil {
		return nil, err
	}
	return &workload{
		run:        elector.Run,
		elector:    elector,
		collectors: elector.Collectors(),
		api:        httpapi.NewAPIHandler(elector, httpapi.APIOptions{}),
		probes: func(g prometheus.Gatherer) http.Handler {
			return httpapi.NewProbeHandler(elector, readiness, g)
		},
	}, nil
}

// partitionConfig is the part of the options a partition group member takes.
func (o *options) partitionConfig() partition.Config {
	return partition.Config{
		Namespace:         o.LeaseNamespace,
		Name:              o.LeaseName,
		Identity:          o.Identity,
		Partitions:        o.Partitions,
		LeaseDuration:     o.LeaseDuration,
		RenewDeadline:     o.RenewDeadline,
		RetryPeriod:       o.RetryPeriod,
		ReleaseOnShutdown: o.ReleaseOnShutdown,
	}
}

// validatePartitions checks --partitions and what partition mode asks of
// the other options.
func (o *options) validatePartitions() []error {
	var errs []error
	if o.Partitions < 0 || o.Partitions > partition.MaxPartitions {
		errs = append(errs, fmt.Errorf("--partitions must be within 0..%d (0: leader election), got %d", partition.MaxPartitions, o.Partitions))
	}
	if o.Partitions > 0 && o.Routing.Mode != string(routing.ModeNone) {
		errs = append(errs, fmt.Errorf("--route=%s publishes one leader; it cannot be combined with --partitions", o.Routing.Mode))
	}
	if o.Partitions > 0 && len(o.LeaseName) > partition.MaxGroupNameLength {
		errs = append(errs, fmt.Errorf("--lease-name %q is longer than %d characters, the most partition mode allows (it is a label value)", o.LeaseName, partition.MaxGroupNameLength))
	}
	return errs
}

// clientRates returns the client rate limits: the flags when given; in
// partition mode otherwise enough for one pod to renew every partition each
// retry period twice over (client-go's default of 5 per second would make a
// pod that owns many partitions miss its renewals), at most maxDerivedQPS
// (Validate refuses a configuration that needs more than that).
func (o *options) clientRates() (qps float32, burst int) {
	qps, burst = o.KubeAPIQPS, o.KubeAPIBurst
	if o.Partitions == 0 {
		return qps, burst
	}
	leases := o.Partitions + 1
	if qps == 0 {
		qps = float32(min(maxDerivedQPS, max(5, 2*o.partitionLeaseRate())))
	}
	if burst == 0 {
		burst = max(10, 2*leases)
	}
	return qps, burst
}
