package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/api"
)

// `leader-elector run --partitions -- CMD` runs one supervisor process per
// partition term this pod owns: the same binary, with the same flags and
// --partition-term=P@T (partition.go). A process each, not a goroutine
// each, because the leader mode's guarantees are per process: the
// supervisor is its children's subreaper and kills every process its child
// left, which it could not tell apart from another partition's if one
// process ran them all; and its watchdog, pipes and signals stay as tested.
// The cost is one small Go process per owned partition (docs/supervisor.md).

// PartitionsConfig is the dispatcher of `run --partitions`.
type PartitionsConfig struct {
	// LongPoll long-polls GET /partitions; its timeout exceeds 30 s.
	LongPoll *api.Client
	// Supervise returns the command of one partition term's supervisor.
	Supervise func(pt PartitionTerm) *exec.Cmd
	// PollInterval spaces the retries after a failed request.
	PollInterval time.Duration
	// StopGrace is the supervisors' --stop-grace, checked against the
	// first claim that shows the renew deadline, as each supervisor
	// would: a misfit is refused once, here, not by every supervisor.
	StopGrace time.Duration
	// RestartBackoff is the first delay before a partition's next
	// supervisor after one failed (a non-zero exit); it doubles up to
	// maxRestartBackoff while they keep failing.
	RestartBackoff time.Duration
	Signals        <-chan os.Signal
	// Stderr gets the one-line refusal of a sidecar not in partition mode.
	Stderr io.Writer
}

// partitionSupervisor is one running supervisor process.
type partitionSupervisor struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// partitionsAnswer is one answer of GET /partitions, or its error.
type partitionsAnswer struct {
	p   api.Partitions
	err error
}

type dispatcher struct {
	cfg PartitionsConfig
	log klog.Logger
	// running: the supervisors that run, by term.
	running map[PartitionTerm]*partitionSupervisor
	// retryAt: a partition whose last supervisor ended waits until then
	// for its next, --restart-backoff after a success (the term is
	// usually over: the answer that says so may come a moment after the
	// exit; if it goes on, the supervisor could not tell, and the term
	// gets a new one), doubling up to 30 s (backoff) after failures.
	retryAt map[int]time.Time
	backoff map[int]time.Duration
	// lastTerm is each partition's term whose supervisor ended last.
	lastTerm map[int]PartitionTerm
	// foreign are the children this process had before it supervised
	// anything (see supervisor.foreign).
	foreign map[int]bool
	// checked: StopGrace was checked against a claim.
	checked bool
}

// RunPartitions dispatches until SIGTERM or SIGINT, after which it waits
// for every partition's supervisor to end, and returns the exit code: 0;
// ExitBadInput when the sidecar does not serve GET /partitions.
func RunPartitions(ctx context.Context, cfg PartitionsConfig) int {
	d := &dispatcher{
		cfg:      cfg,
		log:      klog.FromContext(ctx),
		running:  map[PartitionTerm]*partitionSupervisor{},
		retryAt:  map[int]time.Time{},
		lastTerm: map[int]PartitionTerm{},
		backoff:  map[int]time.Duration{},
	}
	return d.run(ctx)
}

func (d *dispatcher) run(ctx context.Context) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A subreaper, as each supervisor is: the processes a supervisor
	// leaves when it is killed (its watchdog, what left its child's
	// group) are adopted here, killed and reaped, never left running or
	// as zombies (this process may be the container's PID 1).
	d.foreign = directChildren()
	if err := becomeSubreaper(); err != nil {
		d.log.Error(err, "Cannot become a child subreaper, so what a killed partition supervisor leaves is not found")
	}
	orphans := make(chan os.Signal, 1)
	signal.Notify(orphans, syscall.SIGCHLD)
	defer signal.Stop(orphans)
	answers := make(chan partitionsAnswer, 1)
	go d.watch(ctx, answers)
	exited := make(chan PartitionTerm, 16)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var (
		latest   *api.Partitions
		shutdown bool
	)
	for {
		select {
		case a := <-answers:
			var e *api.Error
			if errors.As(a.err, &e) && e.StatusCode == http.StatusNotFound && len(d.running) == 0 {
				fmt.Fprintf(d.cfg.Stderr, "leader-elector run: --partitions: the sidecar at %s does not serve GET /partitions (%d: %s): start it with --partitions, or run without --partitions\n",
					d.cfg.LongPoll.BaseURL(), e.StatusCode, e.Message)
				return ExitBadInput
			}
			if a.err != nil {
				d.log.V(1).Info("GET /partitions failed; retrying", "err", a.err.Error())
				continue
			}
			latest = &a.p
			if err := d.checkStopGrace(a.p); err != nil {
				fmt.Fprintf(d.cfg.Stderr, "leader-elector run: %s\n", err)
				d.stopAll(syscall.SIGTERM)
				return ExitBadInput
			}
		case <-orphans:
			_ = reapOrphans(nil, d.keep)
		case pt := <-exited:
			d.reap(pt)
		case sig := <-d.cfg.Signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				if !shutdown {
					d.log.Info("Stopping on a signal: every partition's supervisor stops its child and releases the partition", "signal", signalName(sig), "running", len(d.running))
				}
				shutdown = true
				sig = syscall.SIGTERM
			}
			for _, ps := range d.running {
				_ = ps.cmd.Process.Signal(sig)
			}
		case <-timer.C:
		case <-ctx.Done():
			d.stopAll(syscall.SIGKILL)
			return ExitRuntimeError
		}
		if shutdown {
			if len(d.running) == 0 {
				return 0
			}
			continue
		}
		if latest != nil {
			d.startDue(*latest, exited)
		}
		rearm(timer, d.untilNextRetry())
	}
}

// startDue starts a supervisor for every term this pod owns that has none:
// not draining (a drain starts nothing), not backing off.
func (d *dispatcher) startDue(p api.Partitions, exited chan<- PartitionTerm) {
	now := time.Now()
	for _, o := range p.Owned {
		pt := PartitionTerm{Partition: o.Partition, Token: o.FencingToken}
		if o.Draining || d.running[pt] != nil || now.Before(d.retryAt[o.Partition]) {
			continue
		}
		if o.ValidForMs != nil && *o.ValidForMs <= 0 {
			continue
		}
		d.start(pt, exited)
	}
}

// checkStopGrace refuses a --stop-grace that does not fit in the claim
// (as startOnClaim does in leader mode), at the first answer that shows
// the renew deadline: validUntil − renewTime of an owned partition.
func (d *dispatcher) checkStopGrace(p api.Partitions) error {
	if d.checked {
		return nil
	}
	for _, o := range p.Owned {
		if o.ValidUntil.IsZero() || o.RenewTime.IsZero() {
			continue
		}
		d.checked = true
		if rd := o.ValidUntil.Sub(o.RenewTime.Time); d.cfg.StopGrace+killAhead >= rd {
			return fmt.Errorf("--stop-grace %v does not fit in the claim: give one well below the sidecar's renew deadline (%v: validUntil − renewTime); the child is killed 100ms before the claim ends", d.cfg.StopGrace, rd.Round(time.Millisecond))
		}
		return nil
	}
	return nil
}

// stopAll sends sig to every supervisor and waits for them.
func (d *dispatcher) stopAll(sig syscall.Signal) {
	for _, ps := range d.running {
		_ = ps.cmd.Process.Signal(sig)
	}
	for _, ps := range d.running {
		<-ps.done
	}
}

// keep tells this process's children that are not leftovers: the running
// supervisors and the children it had before it started any.
func (d *dispatcher) keep(pid int) bool {
	if d.foreign[pid] {
		return true
	}
	for _, ps := range d.running {
		if ps.cmd.Process.Pid == pid {
			return true
		}
	}
	return false
}

func (d *dispatcher) start(pt PartitionTerm, exited chan<- PartitionTerm) {
	cmd := d.cfg.Supervise(pt)
	if err := cmd.Start(); err != nil {
		d.log.Error(err, "Cannot start the partition's supervisor", "partition", pt.Partition, "fencingToken", pt.Token)
		d.failed(pt.Partition)
		return
	}
	ps := &partitionSupervisor{cmd: cmd, done: make(chan struct{})}
	go func() {
		ps.err = cmd.Wait()
		close(ps.done)
		exited <- pt
	}()
	d.running[pt] = ps
	d.log.Info("Supervising a partition", "partition", pt.Partition, "fencingToken", pt.Token, "pid", cmd.Process.Pid)
}

// reap takes the exit of pt's supervisor.
func (d *dispatcher) reap(pt PartitionTerm) {
	ps := d.running[pt]
	delete(d.running, pt)
	code := exitCode(ps.err)
	d.log.Info("A partition's supervisor ended", "partition", pt.Partition, "fencingToken", pt.Token, "result", describe(ps.err))
	// A supervisor that was killed leaves its watchdog and what left its
	// child's group to this process: nothing of it may run on. Every
	// other supervisor holds its own tree, so whatever this process has
	// adopted is a dead supervisor's. One that exited 0 left nothing (it
	// killed its child's tree itself), so the walk, which may wait up to
	// 5 s for a process that cannot die, is spared then.
	if code != 0 {
		if n, err := killLeftovers(nil, d.keep); n > 0 || err != nil {
			d.log.Info("Killed what an ended partition supervisor left", "partition", pt.Partition, "count", n, "err", err)
		}
	}
	again := d.lastTerm[pt.Partition] == pt
	d.lastTerm[pt.Partition] = pt
	if code == 0 && !again {
		delete(d.backoff, pt.Partition)
		d.retryAt[pt.Partition] = time.Now().Add(d.cfg.RestartBackoff)
		return
	}
	// A failure, or the same term's supervisor ending again: back off,
	// doubling.
	d.failed(pt.Partition)
}

// failed backs partition i off: its next supervisor waits, doubling while
// they keep failing, as --on-exit=restart does for one child.
func (d *dispatcher) failed(i int) {
	b := d.backoff[i]
	if b == 0 {
		b = d.cfg.RestartBackoff
	}
	d.retryAt[i] = time.Now().Add(b)
	d.backoff[i] = min(2*b, maxRestartBackoff)
	d.log.Info("The partition's next supervisor waits", "partition", i, "in", b)
}

// nextRetry is the earliest back-off still running (zero: none).
func (d *dispatcher) nextRetry() time.Time {
	var next time.Time
	now := time.Now()
	for _, at := range d.retryAt {
		if at.After(now) && (next.IsZero() || at.Before(next)) {
			next = at
		}
	}
	return next
}

// untilNextRetry is how long until the earliest back-off still running
// ends (an hour, as good as never, when none does).
func (d *dispatcher) untilNextRetry() time.Duration {
	if next := d.nextRetry(); !next.IsZero() {
		return max(time.Until(next), 0)
	}
	return time.Hour
}

// watch long-polls GET /partitions and sends every answer; after a failure
// it waits PollInterval.
func (d *dispatcher) watch(ctx context.Context, out chan<- partitionsAnswer) {
	var rev uint64
	for {
		p, err := d.cfg.LongPoll.WaitPartitions(ctx, rev, longPollWait)
		select {
		case out <- partitionsAnswer{p, err}:
		case <-ctx.Done():
			return
		}
		if err == nil {
			rev = p.Revision
			continue
		}
		select {
		case <-time.After(d.cfg.PollInterval):
		case <-ctx.Done():
			return
		}
	}
}
