package app

import (
	"context"
	"errors"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/partition"
)

// workload is what Run serves: leader election on one Lease, or, with
// --partitions, a member of a partition group.
type workload struct {
	run        func(context.Context) error
	elector    *election.Elector // leader election only (--route publishes its leadership)
	notifier   *httpapi.Notifier // leader election with --on-change-url only
	collectors []prometheus.Collector
	api        http.Handler
	probes     func(prometheus.Gatherer) http.Handler
}

// newWorkload builds what Run serves, on the clients c.
func newWorkload(cfg Config, c *clients) (*workload, error) {
	readiness := cfg.Readiness
	if cfg.partitionMode() {
		if cfg.Notify.URL != "" {
			// Options refuse it: the notifications carry /leader's JSON.
			return nil, errors.New("change notifications are for leader election, not partition mode")
		}
		pcfg := cfg.Partition
		pcfg.Client, pcfg.WatchClient, pcfg.ServerClock = c.requests, c.watches, c.serverClock
		m, err := partition.New(pcfg)
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
	ecfg := cfg.Election
	ecfg.Client, ecfg.WatchClient, ecfg.ServerClock = c.requests, c.watches, c.serverClock
	if c.events != nil {
		// Not a nil *EventRecorder in the interface: client-go checks for nil.
		ecfg.Events = c.events
	}
	elector, err := election.New(ecfg)
	if err != nil {
		return nil, err
	}
	w := &workload{
		run:        elector.Run,
		elector:    elector,
		collectors: elector.Collectors(),
		api:        httpapi.NewAPIHandler(elector, httpapi.APIOptions{}),
		probes: func(g prometheus.Gatherer) http.Handler {
			return httpapi.NewProbeHandler(elector, readiness, g)
		},
	}
	if cfg.Notify.URL != "" {
		w.notifier = httpapi.NewNotifier(elector, cfg.Notify)
		w.collectors = append(w.collectors, w.notifier.Collectors()...)
	}
	return w, nil
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
