package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// namespace holds every Lease and service account of the run.
const namespace = "bench"

// impl is one implementation under test.
type impl struct {
	// key names it in the table and in Lease and candidate names.
	key string
	// pkg is the Go package built, "." for leader-elector; setUp builds it
	// into binary.
	pkg, binary string
	// prefix starts its candidates' identities (and service accounts).
	prefix string
	// leaderElector: it serves probes, /events, validUntil and fencingToken,
	// so the monitor checks those too.
	leaderElector bool
	// partitions > 0 runs leader-elector in partition mode (--partitions).
	partitions int
}

// run builds both implementations, starts the control plane, benchmarks
// each implementation in turn and prints the table.
func run(ctx context.Context, opts *options) (err error) {
	began := time.Now()
	busy0, err := machineBusyTicks()
	if err != nil {
		return err
	}
	impls := []*impl{
		{key: "baseline", pkg: "./bench/baseline", prefix: "base"},
		{key: "leader-elector", pkg: ".", prefix: "le", leaderElector: true},
	}
	set, err := setUp(ctx, opts, "leader-elector-bench-", impls...)
	if err != nil {
		return err
	}
	defer func() { set.tearDown(opts, err != nil) }()
	work, cp, code := set.work, set.cp, set.code
	logf("control plane ready at %s; timings: lease %v, renew %v, retry %v; %d candidates",
		cp.Host(), opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod, opts.Candidates)

	var results []*implResult
	for _, im := range impls {
		logf("=== %s", im.key)
		res, err := benchImpl(ctx, opts, cp, filepath.Join(work, im.key), im)
		if err != nil {
			return fmt.Errorf("%s: %w", im.key, err)
		}
		results = append(results, res)
	}
	logf("=== GET /leader load, the implementations taking turns")
	if err := httpLoad(ctx, opts, cp, filepath.Join(work, "http"), impls, results); err != nil {
		return fmt.Errorf("HTTP load: %w", err)
	}

	table := renderTable(opts, results[0], results[1])
	busy1, err := machineBusyTicks()
	if err != nil {
		return err
	}
	took := time.Since(began)
	busyCores := float64(busy1-busy0) / clockTicksPerSecond / took.Seconds()
	notes := renderNotes(opts, results, took, busyCores) + fmt.Sprintf("\nCode: %s, %s.\n", code, machine())
	fmt.Println()
	fmt.Print(table)
	fmt.Println()
	fmt.Print(notes)
	if opts.Output != "" {
		if err := os.WriteFile(opts.Output, []byte(table+"\n"+notes), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", opts.Output, err)
		}
	}
	// Only leader-elector's safety fails the run: the baseline's findings
	// are reported, not ours to fix (client-go compares Lease records at
	// one-second precision, so with a sub-second retry period a follower can
	// take an abandoned Lease up to a second early).
	if n := results[1].safetyViolations(); n > 0 {
		return fmt.Errorf("leader-elector: %d safety violations; see the notes above", n)
	}
	return nil
}

// benchImpl runs every phase for one implementation on its own Lease.
func benchImpl(ctx context.Context, opts *options, cp *cluster.ControlPlane, work string, im *impl) (*implResult, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", work, err)
	}
	res := &implResult{impl: im}
	g := newGroup(opts, cp, im, "bench-"+im.key, work)
	defer g.stopAll()
	if im.leaderElector && opts.HealthGating {
		stop, err := g.gateOnHealth(ctx)
		if err != nil {
			return nil, err
		}
		defer stop()
	}

	history, stopHistory, err := watchLease(ctx, cp.AdminClient(), namespace, g.lease)
	if err != nil {
		return nil, err
	}
	defer stopHistory()
	g.startPolling()
	for range opts.Candidates {
		if _, err := g.start(ctx); err != nil {
			return nil, err
		}
	}
	leader, err := g.WaitLeader(ctx, 30*time.Second+opts.LeaseDuration)
	if err != nil {
		return nil, fmt.Errorf("first election: %w", err)
	}
	if err := g.WaitFollowing(ctx, g.settleBound(), leader); err != nil {
		return nil, err
	}

	if err := handovers(ctx, opts, g, history, res); err != nil {
		return nil, fmt.Errorf("graceful handovers: %w", err)
	}
	if err := crashes(ctx, opts, g, history, res); err != nil {
		return nil, fmt.Errorf("crash failovers: %w", err)
	}
	// Polling and the watch would be most of an idle candidate's work.
	g.stopPolling()
	stopHistory()
	res.monitor = g.mon.Check()
	g.mu.Lock()
	res.toAnswer, res.toElection = g.toAnswer, g.toElection
	g.mu.Unlock()

	if err := idle(ctx, opts, g, res); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	if err := fanout(ctx, g, res); err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	if err := countRequests(cp, res); err != nil {
		return nil, err
	}
	users := map[string]bool{}
	for _, c := range g.Members() {
		users[c.user] = true
	}
	if err := countWindowRequests(cp, users, res.handoverRequests, res.crashRequests); err != nil {
		return nil, err
	}
	return res, nil
}

// logWriter sends the control plane's progress lines to the bench log.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// logf prints a progress line on stderr; the table goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// machine describes where the figures were taken.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s", runtime.NumCPU(), model, runtime.Version())
}
