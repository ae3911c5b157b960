package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
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
	// ended: terms whose supervisor exited with 0 (the term's work is
	// over); never started again. Forgotten once GET /partitions no
	// longer shows them (a term, once over, never comes back).
	ended map[PartitionTerm]bool
	// retryAt and backoff: a partition whose last supervisor failed waits
	// until retryAt for its next.
	retryAt map[int]time.Time
	backoff map[int]time.Duration
}

// RunPartitions dispatches until SIGTERM or SIGINT, after which it waits
// for every partition's supervisor to end, and returns the exit code: 0;
// ExitBadInput when the sidecar does not serve GET /partitions.
func RunPartitions(ctx context.Context, cfg PartitionsConfig) int {
	d := &dispatcher{
		cfg:     cfg,
		log:     klog.FromContext(ctx),
		running: map[PartitionTerm]*partitionSupervisor{},
		ended:   map[PartitionTerm]bool{},
		retryAt: map[int]time.Time{},
		backoff: map[int]time.Duration{},
	}
	return d.run(ctx)
}

func (d *dispatcher) run(ctx context.Context) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
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
			for _, ps := range d.running {
				_ = ps.cmd.Process.Kill()
				<-ps.done
			}
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
		resetWallTimer(timer, d.nextRetry())
	}
}

// startDue starts a supervisor for every term this pod owns that has none:
// not draining (a drain starts nothing), not ended, not backing off.
func (d *dispatcher) startDue(p api.Partitions, exited chan<- PartitionTerm) {
	now := time.Now()
	owned := map[PartitionTerm]bool{}
	for _, o := range p.Owned {
		pt := PartitionTerm{Partition: o.Partition, Token: o.FencingToken}
		owned[pt] = true
		if o.Draining || d.running[pt] != nil || d.ended[pt] || now.Before(d.retryAt[o.Partition]) {
			continue
		}
		if o.ValidForMs != nil && *o.ValidForMs <= 0 {
			continue
		}
		d.start(pt, exited)
	}
	for pt := range d.ended {
		if !owned[pt] {
			delete(d.ended, pt)
		}
	}
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
	if code == 0 {
		d.ended[pt] = true
		delete(d.backoff, pt.Partition)
		delete(d.retryAt, pt.Partition)
		return
	}
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

func resetWallTimer(t *time.Timer, at time.Time) {
	wait := time.Hour
	if !at.IsZero() {
		wait = max(time.Until(at), 0)
	}
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(wait)
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
