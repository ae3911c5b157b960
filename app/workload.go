package app

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/health"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/notify"
	"github.com/leader-elector/leader-elector/partition"
)

// workload is what Run serves: leader election on one Lease, or, with
// --partitions, a member of a partition group.
type workload struct {
	run        func(context.Context) error
	elector    *election.Elector // leader election only (--route publishes its leadership)
	notifier   *notify.Notifier  // with --on-change-url only
	collectors []prometheus.Collector
	api        http.Handler
	probes     func(prometheus.Gatherer) http.Handler
}

// newWorkload builds what Run serves, on the clients c.
func newWorkload(cfg Config, c *clients) (*workload, error) {
	if cfg.partitionMode() {
		return newPartitionMember(cfg, c)
	}
	return newElection(cfg, c)
}

// newPartitionMember is a member of the partition group (--partitions).
func newPartitionMember(cfg Config, c *clients) (*workload, error) {
	pcfg := cfg.Partition
	pcfg.Client, pcfg.WatchClient, pcfg.ServerClock = c.requests, c.watches, c.serverClock
	// Health gating in partition mode: the app's probe alone; the member
	// publishes the result and moves partitions by it.
	var probe *health.AppProbe
	var member *partition.Member
	if h := cfg.Health; h.URL != "" {
		var err error
		if probe, err = health.NewAppProbe(h.URL, h.Period, h.Failures, h.Successes, func() { member.AppHealthChanged() }); err != nil {
			return nil, err
		}
		pcfg.AppHealth = probe
	}
	m, err := partition.New(pcfg)
	if err != nil {
		return nil, err
	}
	member = m
	run := m.Run
	if probe != nil {
		run = func(ctx context.Context) error { return runBeside(ctx, m.Run, probe.Run) }
	}
	w := &workload{
		run:        run,
		collectors: m.Collectors(),
		api:        httpapi.NewPartitionsAPIHandler(m, httpapi.APIOptions{}),
		probes: func(g prometheus.Gatherer) http.Handler {
			return httpapi.NewPartitionsProbeHandler(m, cfg.Readiness, g)
		},
	}
	if cfg.Notify.URL != "" {
		w.notifier = notify.NewPartitions(m, cfg.Notify)
		w.collectors = append(w.collectors, w.notifier.Collectors()...)
	}
	return w, nil
}

// newElection is leader election on one Lease, with health gating and
// change notifications where configured.
func newElection(cfg Config, c *clients) (*workload, error) {
	ecfg := cfg.Election
	ecfg.Client, ecfg.WatchClient, ecfg.ServerClock = c.requests, c.watches, c.serverClock
	if c.events != nil {
		// Not a nil *leaseevents.Recorder in the interface: client-go checks for nil.
		ecfg.Events = c.events
	}
	var gating *health.Health
	if cfg.Health.Enabled() {
		hcfg := cfg.Health
		hcfg.Client, hcfg.WatchClient = c.requests, c.watches
		var err error
		if gating, err = health.New(hcfg); err != nil {
			return nil, err
		}
		ecfg.Gate = gating.Gate()
		// The candidates Lease is the registry a release picks its
		// successor from (health.Health.Successor).
		ecfg.Successor = gating.Successor
		// And the order in which the candidates try a Lease no successor
		// was named for (a crash takeover).
		ecfg.TakeoverRank = gating.TakeoverRank
	}
	// The notifier is given every new state by the elector itself, so that
	// it misses none; it is built on the elector, hence the pointer.
	var notifier atomic.Pointer[notify.Notifier]
	if cfg.Notify.URL != "" {
		ecfg.OnState = func(s leadership.State) {
			if n := notifier.Load(); n != nil {
				n.Observe(s)
			}
		}
	}
	elector, err := election.New(ecfg)
	if err != nil {
		return nil, err
	}
	w := &workload{
		run:        elector.Run,
		elector:    elector,
		collectors: elector.Collectors(),
		api:        httpapi.NewAPIHandler(elector, httpapi.APIOptions{Acquire: cfg.Acquire, ReleaseDrain: proxyDrain(cfg)}),
		probes: func(g prometheus.Gatherer) http.Handler {
			return httpapi.NewProbeHandler(elector, cfg.Readiness, g)
		},
	}
	if gating != nil {
		w.gateOn(gating, cfg.Readiness)
	}
	if cfg.Notify.URL != "" {
		w.notifier = notify.New(elector, cfg.Notify)
		notifier.Store(w.notifier)
		w.collectors = append(w.collectors, w.notifier.Collectors()...)
	}
	return w, nil
}

// gateOn adds health gating to an election: its metrics, its readiness,
// and its run beside the elector's, until the elector returns (when ctx
// ends, after releasing the Lease); health gating then removes this
// candidate's entry from the candidates Lease.
func (w *workload) gateOn(gating *health.Health, readiness httpapi.Readiness) {
	elector := w.elector
	w.collectors = append(w.collectors, gating.Collectors()...)
	w.probes = func(g prometheus.Gatherer) http.Handler {
		return httpapi.NewGatedProbeHandler(elector, readiness, gating.Ready, g)
	}
	w.run = func(ctx context.Context) error {
		return runBeside(ctx, elector.Run, func(ctx context.Context) { _ = gating.Run(ctx, elector) })
	}
}

// runBeside runs main, and side beside it on a context that ends when
// main returns (or ctx ends), and returns main's error once side has
// returned too.
func runBeside(ctx context.Context, main func(context.Context) error, side func(context.Context)) error {
	sideCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		side(sideCtx)
	}()
	err := main(ctx)
	stop()
	<-done
	return err
}

// startNotifier starts the change notifications, if any, on a context of
// their own: they must outlive ctx to tell the app of the elector's last
// state. The function returned stops them once that state is delivered or
// the notifier's flush timeout has passed.
func (w *workload) startNotifier(ctx context.Context) (stop func()) {
	if w.notifier == nil {
		return func() {}
	}
	notifyCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.notifier.Run(notifyCtx)
	}()
	return func() {
		cancel()
		<-done
	}
}
