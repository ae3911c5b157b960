// Package app composes the sidecar from its parts: it builds the API
// clients, chooses the workload (leader election or a partition group
// member), starts the HTTP servers and the routing, and stops them in
// order. It takes a Config that package options builds from the command
// line and the environment; it parses nothing itself.
package app

import (
	"context"
	"errors"

	"time"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/health"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/notify"
	"github.com/leader-elector/leader-elector/partition"
	"github.com/leader-elector/leader-elector/proxy"
	"github.com/leader-elector/leader-elector/routing"
)

// shutdownTimeout bounds the graceful stop of the HTTP servers.
const shutdownTimeout = 5 * time.Second

// eventsFlushTimeout bounds the wait, at shutdown, for the last Events
// (this pod's "stopped leading") to be written. The Lease is released
// before, so it does not delay the handover.
const eventsFlushTimeout = 2 * time.Second

// Config is everything Run needs, each part in the form of the package
// that uses it.
type Config struct {
	// Version is reported in the startup log line and, with Revision (the
	// commit; empty: the one Go stamped into the binary, if any), in
	// leader_elector_build_info.
	Version  string
	Revision string
	// LogFormat and Verbosity set the logger up (Main): "text" or "json",
	// and klog's -v. LogNotices, if set, logs what the configuration has to
	// say (deprecated flags) once the logger is up.
	LogFormat  string
	Verbosity  int
	LogNotices func(klog.Logger)
	// Client is how to reach the API server.
	Client ClientConfig
	// HTTPAddress is the application API's listen address, ProbeAddress
	// that of /readyz, /healthz and /metrics.
	HTTPAddress  string
	ProbeAddress string
	Readiness    httpapi.Readiness
	// Events records the Lease's Events (leader election only).
	Events bool
	// Election is leader election on one Lease; its clients are filled in
	// by Run. Its Namespace, Name and Identity are also the partition
	// group's and the routing's.
	Election election.Config
	// Acquire is what POST /acquire does without a query.
	Acquire leadership.AcquireOptions
	// Partition, when its Partitions is above 0, makes this pod a member
	// of a partition group instead; its clients are filled in by Run.
	Partition partition.Config
	// Health, when its URL is set, gates this pod's candidacy on its
	// app's health (leader election only); its clients are filled in by
	// Run.
	Health health.Config
	// Routing publishes the leader besides readiness (Mode none: not at
	// all); its Client and Leadership are filled in by Run.
	Routing routing.Config
	// Notify POSTs each change of the leader election's state to the app
	// (URL empty: not at all).
	Notify notify.Options
	// Proxy, when set, forwards TCP clients to the leader's app (leader
	// election only); its Leadership and Resolver are filled in by Run.
	Proxy *proxy.Config
}

// partitionMode reports whether the pod is a partition group member.
func (c Config) partitionMode() bool { return c.Partition.Partitions > 0 }

// Run takes part in the election and serves the HTTP APIs until ctx ends,
// then releases what it holds and stops the servers.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	// Before the clients: client-go's metric hooks count every request.
	metrics, err := newMetrics(cfg)
	if err != nil {
		return err
	}
	c, err := newClients(ctx, cfg)
	if err != nil {
		return err
	}
	// Last: the local lease store serves the release at shutdown.
	defer c.close()
	w, err := newWorkload(cfg, c)
	if err != nil {
		return err
	}
	if err := metrics.registerOwn(w.collectors); err != nil {
		return err
	}
	if err := checkLeaderLabel(ctx, cfg.Routing, c.routing); err != nil {
		return err
	}
	servers, err := listen(ctx, cfg, w, c, metrics)
	if err != nil {
		return err
	}
	logStart(logger, cfg, servers)
	reportStartup(ctx, cfg, c.routing)

	// A server that fails stops everything: the pod is useless without it.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	servers.serve(stop)
	stopProxy := startProxy(ctx, servers.proxy)

	// The router withdraws this pod when runCtx ends, while the elector
	// releases the Lease; either order is safe (the writes are fenced).
	routingDone, err := startRouting(runCtx, cfg.Routing, c.routing, w.elector, metrics.own)
	if err != nil {
		stop(err)
	}

	// The notifier runs on until the elector has stopped, so that the app
	// is told of its last state (not leader) too.
	stopNotifier := w.startNotifier(ctx)

	// The elector stops claiming leadership the moment runCtx ends, then
	// releases the Lease; the servers keep answering (not leader, not ready)
	// until it has done so.
	electionErr := w.run(runCtx)
	if electionErr == nil && errors.Is(context.Cause(runCtx), context.Canceled) {
		// A shutdown, not a failure: the Service may still send clients.
		lingerProxy(ctx, cfg.Proxy, servers.proxy, w)
	}
	stopProxy()
	<-routingDone
	stopNotifier()
	c.flushEvents(ctx)
	servers.shutdown(ctx)
	if electionErr != nil {
		return electionErr
	}
	// A signal cancels ctx (context.Canceled); anything else is a server
	// that failed.
	if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// logStart reports, in one line, what this pod runs with.
func logStart(logger klog.Logger, cfg Config, s *servers) {
	e := cfg.Election
	logger.Info("Starting",
		"version", cfg.Version,
		"lease", klog.KRef(e.Namespace, e.Name),
		"identity", e.Identity,
		"leaseDuration", e.LeaseDuration,
		"renewDeadline", e.RenewDeadline,
		"retryPeriod", e.RetryPeriod,
		"httpAddress", s.api.Addr(),
		"probeAddress", s.probes.Addr(),
		"readiness", cfg.Readiness,
		"releaseOnShutdown", e.ReleaseOnShutdown,
		"partitions", cfg.Partition.Partitions,
		"events", cfg.Events && !cfg.partitionMode() && cfg.Client.LeaseFile == "",
		"leaseFile", cfg.Client.LeaseFile,
		"appHealthURL", cfg.Health.URL,
		"onChangeURL", cfg.Notify.URL,
		"proxyAddress", s.proxyAddr(),
		"proxyPeerAddress", s.proxyPeerAddr(),
	)
}
