package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/invariant"
)

// runLocal measures the local lease store (--lease-store=file:, `make
// bench-local`): Candidates processes of the real binary elect through one
// file in a temporary directory, and the run times
//   - a graceful handover: POST /release to the leader, sent → another
//     candidate says isLeader: true (each follower long-polls GET /leader,
//     so the figure has no poll interval in it);
//   - a crash takeover: SIGKILL of the leader → another says it leads,
//     beside the lease duration it cannot beat (the dead leader's claim
//     runs that long from its last renewal);
//   - the CPU of an idle leader and follower.
//
// The invariant monitor asks every candidate for its state every
// PollInterval throughout; a violation fails the run. There is no client-go
// baseline: client-go has no lock on a file.
func runLocal(ctx context.Context, opts *options) (err error) {
	work, err := os.MkdirTemp("", "leader-elector-bench-local-")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer func() { finishWorkDir(opts, work, err != nil) }()
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	binary := filepath.Join(work, "bin", "leader-elector")
	if err := build(ctx, ".", binary); err != nil {
		return err
	}
	b := &localBench{opts: opts, work: work, binary: binary, leaseFile: filepath.Join(work, "lease", "leases.json"), mon: invariant.New(true)}
	if err := os.MkdirAll(filepath.Dir(b.leaseFile), 0o755); err != nil {
		return err
	}
	defer b.group.KillAll()
	pollCtx, stopPolling := context.WithCancel(ctx)
	defer stopPolling()
	for range opts.Candidates {
		if _, err := b.start(ctx, pollCtx); err != nil {
			return err
		}
	}
	if _, err := b.group.WaitLeader(ctx, 2*opts.LeaseDuration+30*time.Second); err != nil {
		return fmt.Errorf("first election: %w", err)
	}
	logf("local store: %d candidates on %s; lease %v, renew %v, retry %v", opts.Candidates, b.leaseFile, opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod)

	handovers, err := b.handovers(ctx)
	if err != nil {
		return fmt.Errorf("graceful handovers: %w", err)
	}
	crashes, err := b.crashes(ctx, pollCtx)
	if err != nil {
		return fmt.Errorf("crash takeovers: %w", err)
	}
	stopPolling()
	idle, err := b.idle(ctx)
	if err != nil {
		return err
	}
	report := b.mon.Check()
	if n := report.Count(); n > 0 {
		return fmt.Errorf("%d safety violations: %s", n, strings.Join(report.Violations, "; "))
	}
	table := fmt.Sprintf(`| local store, %d candidates, lease %v / renew %v / retry %v | p50 | p99 | max | n |
|---|---|---|---|---|
| graceful handover: POST /release sent → another candidate leads | %s | %s | %s | %d |
| crash takeover: SIGKILL → another candidate leads (the lease is %v) | %s | %s | %s | %d |

Idle CPU over %v: %s. Invariant monitor: %d answers, %d claims, 0 violations. Code: %s, %s.
`, opts.Candidates, opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod,
		ms(percentile(handovers, 0.5)), ms(percentile(handovers, 0.99)), ms(maxDuration(handovers)), len(handovers),
		opts.LeaseDuration, ms(percentile(crashes, 0.5)), ms(percentile(crashes, 0.99)), ms(maxDuration(crashes)), len(crashes),
		opts.IdleWindow, idle, report.Observations, report.Claims, describe(ctx, root), machine())
	fmt.Println()
	fmt.Print(table)
	if opts.Output != "" {
		return os.WriteFile(opts.Output, []byte(table), 0o644)
	}
	return nil
}

// localBench is one run of runLocal.
type localBench struct {
	opts         *options
	work, binary string
	leaseFile    string
	mon          *invariant.Checker
	group        harness.Group[*harness.Candidate]
	next         int
}

// start starts one more candidate on the lease file, and polls it for the
// monitor until pollCtx ends.
func (b *localBench) start(ctx, pollCtx context.Context) (*harness.Candidate, error) {
	name := fmt.Sprintf("local-%d", b.next)
	b.next++
	c, err := harness.StartCandidate(ctx, harness.CandidateOptions{
		Binary:    b.binary,
		Name:      name,
		Lease:     "bench-local",
		LeaseFile: b.leaseFile,
		Timings:   harness.Timings{LeaseDuration: b.opts.LeaseDuration, RenewDeadline: b.opts.RenewDeadline, RetryPeriod: b.opts.RetryPeriod},
		LogPath:   filepath.Join(b.work, name+".log"),
		HTTPClient: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 4},
		},
	})
	if err != nil {
		return nil, err
	}
	b.group.Add(c)
	go func() {
		tick := time.NewTicker(b.opts.PollInterval)
		defer tick.Stop()
		for {
			select {
			case <-pollCtx.Done():
				return
			case <-c.Done():
				return
			case <-tick.C:
			}
			sent := time.Now()
			if l, err := c.API().Leader(pollCtx); err == nil {
				b.mon.Record(invariant.LeaderAnswer(c.Name(), sent, l))
			}
		}
	}()
	return c, nil
}

// timeToNextLeader does fault to leader and returns the time from it to
// another candidate saying it leads. Each follower has answered GET /leader
// before the fault, and long-polls from that answer's revision, so a change
// that comes before its long-poll is sent is still seen at once.
func (b *localBench) timeToNextLeader(ctx context.Context, leader *harness.Candidate, fault func() error) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*b.opts.LeaseDuration+10*time.Second)
	defer cancel()
	var followers []*harness.Candidate
	for _, c := range b.group.Live() {
		if c != leader {
			followers = append(followers, c)
		}
	}
	led := make(chan time.Time, len(followers))
	ready := make(chan error, len(followers))
	for _, c := range followers {
		go func() {
			l, err := c.API().Leader(ctx)
			ready <- err
			// Long-polls shorter than the HTTP client's timeout (2 s).
			for err == nil && !l.IsLeader {
				l, err = c.API().WaitLeader(ctx, l.Revision, time.Second)
			}
			if err == nil {
				led <- time.Now()
			}
		}()
	}
	for range followers {
		if err := <-ready; err != nil {
			return 0, fmt.Errorf("a follower's GET /leader before the fault: %w", err)
		}
	}
	began := time.Now()
	if err := fault(); err != nil {
		return 0, err
	}
	select {
	case at := <-led:
		return at.Sub(began), nil
	case <-ctx.Done():
		return 0, errors.New("no other candidate led in time")
	}
}

// handovers makes the leader release, a lease duration apart: a released
// leader sits out that long, so with three candidates the next one is never
// sitting out too, and a group starts no more than one term a second, the
// rate it sustains without waiting for the clock (election.newTermToken).
func (b *localBench) handovers(ctx context.Context) ([]time.Duration, error) {
	var took []time.Duration
	spacing := max(time.Second, b.opts.LeaseDuration)
	for range b.opts.Handovers {
		if err := pause(ctx, spacing); err != nil {
			return nil, err
		}
		leader, err := b.group.WaitLeader(ctx, 2*b.opts.LeaseDuration+10*time.Second)
		if err != nil {
			return nil, err
		}
		d, err := b.timeToNextLeader(ctx, leader, func() error {
			_, err := leader.API().Release(ctx)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("POST /release to %s: %w", leader.Name(), err)
		}
		took = append(took, d)
	}
	return took, nil
}

func (b *localBench) crashes(ctx, pollCtx context.Context) ([]time.Duration, error) {
	var took []time.Duration
	for range b.opts.Crashes {
		leader, err := b.group.WaitLeader(ctx, 2*b.opts.LeaseDuration+10*time.Second)
		if err != nil {
			return nil, err
		}
		d, err := b.timeToNextLeader(ctx, leader, func() error { leader.Kill(); return nil })
		if err != nil {
			return nil, err
		}
		took = append(took, d)
		if _, err := b.start(ctx, pollCtx); err != nil {
			return nil, err
		}
	}
	return took, nil
}

// idle measures the CPU of the leader and of each follower over IdleWindow,
// after IdleWarmup, with nothing asking them anything.
func (b *localBench) idle(ctx context.Context) (string, error) {
	if err := pause(ctx, b.opts.IdleWarmup); err != nil {
		return "", err
	}
	live := b.group.Live()
	before := make([]uint64, len(live))
	for i, c := range live {
		t, err := cpuTicks(c.Pid())
		if err != nil {
			return "", err
		}
		before[i] = t
	}
	if err := pause(ctx, b.opts.IdleWindow); err != nil {
		return "", err
	}
	var parts []string
	for i, c := range live {
		t, err := cpuTicks(c.Pid())
		if err != nil {
			return "", err
		}
		role := "follower"
		if l, err := c.API().Leader(ctx); err == nil && l.IsLeader {
			role = "leader"
		}
		cpu := float64(t-before[i]) / clockTicksPerSecond
		parts = append(parts, fmt.Sprintf("%s %s %.2f s (%.2f %% of a core)", role, c.Name(), cpu, 100*cpu/b.opts.IdleWindow.Seconds()))
	}
	return strings.Join(parts, ", "), nil
}
