// Command leader-elector is a Kubernetes sidecar for leader election. It
// takes part in the election for a coordination.k8s.io/v1 Lease and tells the
// application next to it, over localhost HTTP, who leads and whether it is
// this pod; its readiness probe passes only on the leader.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// Exit codes of the contract.
const (
	exitOK           = 0
	exitRuntimeError = 1
	exitInvalidInput = 2
)

// shutdownTimeout bounds the graceful stop of the HTTP servers.
const shutdownTimeout = 5 * time.Second

// eventsFlushTimeout bounds the wait, at shutdown, for the last Events
// (this pod's "stopped leading") to be written. The Lease is released
// before, so it does not delay the handover.
const eventsFlushTimeout = 2 * time.Second

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute parses the configuration, runs until a signal, and returns the
// process's exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	opts, fs, err := parseOptions(args, osEnvironment)
	if errors.Is(err, pflag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage of leader-elector:\n%s", fs.FlagUsages())
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector: invalid configuration: %s\n", oneLine(err))
		return exitInvalidInput
	}
	if opts.Version {
		fmt.Fprintf(stdout, "leader-elector %s\n", version)
		return exitOK
	}

	setUpLogging(opts.LogFormat, verbosity(fs), stderr)
	logger := klog.Background().WithName("leader-elector")
	for _, alias := range opts.deprecated {
		logger.Info("Flag is deprecated", "flag", "--"+alias, "use", "--"+deprecatedAliases[alias])
	}
	if len(opts.serviceLinks) > 0 {
		logger.Info("Ignoring environment variables that are Kubernetes service links, not settings", "variables", opts.serviceLinks)
	}

	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	stopSignals := shutdownOnSignals(logger, cancel, make(chan os.Signal, 2))
	defer stopSignals()

	if err := run(ctx, opts); err != nil {
		logger.Error(err, "Exiting")
		klog.Flush()
		return exitRuntimeError
	}
	logger.Info("Stopped")
	klog.Flush()
	return exitOK
}

// shutdownOnSignals cancels on the first SIGTERM or SIGINT and exits at once
// on the second, until stop is called: then the signals get their default
// action back and the goroutine that waits for them ends. sigs is a
// parameter so that a test can see that no signal reaches it after stop.
func shutdownOnSignals(logger klog.Logger, cancel context.CancelFunc, sigs chan os.Signal) (stop func()) {
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	stopped := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-stopped:
			return
		}
		logger.Info("Shutting down", "signal", sig.String())
		cancel()
		select {
		case sig = <-sigs:
		case <-stopped:
			return
		}
		logger.Info("Second signal, exiting at once", "signal", sig.String())
		klog.Flush()
		os.Exit(exitRuntimeError)
	}()
	return func() {
		signal.Stop(sigs)
		close(stopped)
	}
}

// run takes part in the election and serves the HTTP APIs until ctx ends.
func run(ctx context.Context, opts *options) error {
	logger := klog.FromContext(ctx)

	restConfig, err := clientConfig(opts)
	if err != nil {
		return err
	}
	serverClock := election.NewServerClock(nil)
	requests, watches, err := election.NewClientsets(restConfig, opts.RenewDeadline, serverClock)
	if err != nil {
		return err
	}
	events, err := eventRecorder(ctx, opts, restConfig)
	if err != nil {
		return err
	}
	w, err := newWorkload(opts, requests, watches, serverClock, events)
	if err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"lease": opts.LeaseName, "namespace": opts.LeaseNamespace}, registry)
	collectorsToRegister := append([]prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, w.collectors...)
	for _, c := range collectorsToRegister {
		if err := labelled.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}

	routeClient, err := routingClient(restConfig, opts.RenewDeadline)
	if err != nil {
		return err
	}
	if err := checkLeaderLabel(ctx, opts, routeClient); err != nil {
		return err
	}

	apiServer, err := httpapi.Listen(ctx, opts.HTTPAddress, w.api)
	if err != nil {
		return fmt.Errorf("application API: %w", err)
	}
	probeServer, err := httpapi.ListenProbes(ctx, opts.ProbeAddress, w.probes(registry), labelled)
	if err != nil {
		_ = apiServer.Shutdown(context.Background())
		return fmt.Errorf("probe server: %w", err)
	}
	logger.Info("Starting",
		"version", version,
		"lease", klog.KRef(opts.LeaseNamespace, opts.LeaseName),
		"identity", opts.Identity,
		"leaseDuration", opts.LeaseDuration,
		"renewDeadline", opts.RenewDeadline,
		"retryPeriod", opts.RetryPeriod,
		"httpAddress", apiServer.Addr(),
		"probeAddress", probeServer.Addr(),
		"readiness", opts.Readiness,
		"releaseOnShutdown", opts.ReleaseOnShutdown,
		"partitions", opts.Partitions,
		"events", events != nil,
	)
	reportStartup(ctx, opts, routeClient)

	// A server that fails stops everything: the pod is useless without it.
	runCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	for name, s := range map[string]*httpapi.Server{"application API": apiServer, "probe server": probeServer} {
		go func() {
			if err := s.Serve(); err != nil {
				stop(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}

	// The router withdraws this pod when runCtx ends, while the elector
	// releases the Lease; either order is safe (the writes are fenced).
	routingDone, err := startRouting(runCtx, opts, routeClient, w.elector, labelled)
	if err != nil {
		stop(err)
	}

	// The elector stops claiming leadership the moment runCtx ends, then
	// releases the Lease; the servers keep answering (not leader, not ready)
	// until it has done so.
	electionErr := w.run(runCtx)
	<-routingDone
	if events != nil {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventsFlushTimeout)
		if err := events.Close(flushCtx); err != nil {
			logger.Error(err, "Failed to record the last Events")
		}
		cancel()
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, s := range []*httpapi.Server{apiServer, probeServer} {
		if err := s.Shutdown(shutdownCtx); err != nil {
			logger.Error(err, "Failed to shut down an HTTP server gracefully")
		}
	}
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

// eventRecorder returns the recorder of the Lease's Events, or nil when
// they are off (--events=false, or partition mode, which records none).
func eventRecorder(ctx context.Context, opts *options, restConfig *rest.Config) (*election.EventRecorder, error) {
	if !opts.Events || opts.Partitions > 0 {
		return nil, nil
	}
	client, err := sideClient(restConfig, "leader-elector-events", 0)
	if err != nil {
		return nil, err
	}
	return election.NewEventRecorder(ctx, client, opts.Identity), nil
}

// clientConfig loads the kubeconfig given, or the in-cluster configuration.
func clientConfig(opts *options) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if opts.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", opts.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("no usable client configuration (set --kubeconfig outside a pod): %w", err)
	}
	qps, burst := opts.clientRates()
	if qps > 0 {
		cfg.QPS = qps
	}
	if burst > 0 {
		cfg.Burst = burst
	}
	return cfg, nil
}

// setUpLogging selects the log format. Verbosity (-v) is klog's own flag and
// applies to both.
func setUpLogging(format string, v int, stderr io.Writer) {
	if format != "json" {
		return
	}
	handler := slog.NewJSONHandler(stderr, &slog.HandlerOptions{
		// logr maps V(n) to slog level -n.
		Level: slog.Level(-v),
	})
	klog.SetLogger(logr.FromSlogHandler(handler))
}

// verbosity returns the -v level.
func verbosity(fs *pflag.FlagSet) int {
	f := fs.Lookup("v")
	if f == nil {
		return 0
	}
	v, err := strconv.Atoi(f.Value.String())
	if err != nil {
		return 0
	}
	return v
}

// oneLine puts err on one line that prints nothing but itself: joined
// errors are separated by "; ", and any other control character an input
// brought in (a carriage return, a terminal escape) or byte that is not
// UTF-8 is escaped.
func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", "; ")
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isUnsafeInLine(r):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
