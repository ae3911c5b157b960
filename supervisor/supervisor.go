// Package supervisor is `leader-elector run -- CMD ARGS…`: it runs CMD
// only while this pod leads, as a client of the sidecar's application API
// on the same pod (package api), and kills it no later than the moment the
// claim ends. The sidecar stays the one elector; the supervisor needs no
// Kubernetes client and no RBAC. docs/supervisor.md is the reference: the
// guarantee, its bound and its limits.
//
// Every rule of the supervisor's loop is in decide.go, a pure function
// tested on a fake clock; supervisor.go gathers the events it decides on
// and act.go carries out what it decides.
package supervisor

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http/httptrace"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/api"
)

// Exit codes of the supervisor itself; otherwise it exits with the child's.
const (
	// ExitRuntimeError: the supervisor could not do its job (the
	// watchdog could not be started).
	ExitRuntimeError = 1
	// ExitBadInput: the command line is wrong, or --stop-grace does not
	// fit in the claim.
	ExitBadInput = 2
	// ExitCannotExecute and ExitNotFound are a shell's: the command exists
	// but cannot be executed; it does not exist.
	ExitCannotExecute = 126
	ExitNotFound      = 127
)

// On-exit policies: what to do when the child exits by itself while this
// pod leads.
const (
	OnExitRelease = "release"
	OnExitRestart = "restart"
	OnExitExit    = "exit"
)

// Environment the child is given.
const (
	EnvFencingToken = "LEADER_ELECTOR_FENCING_TOKEN"
	EnvValidUntil   = "LEADER_ELECTOR_VALID_UNTIL"
	EnvLease        = "LEADER_ELECTOR_LEASE"
	EnvHolder       = "LEADER_ELECTOR_HOLDER"
)

// killAhead is how long before the claim's end the SIGKILL is sent: the
// signal's delivery, the process's death and a timer's lateness take some
// milliseconds, and the child must be dead, not dying, when the claim ends.
const killAhead = 100 * time.Millisecond

// maxRestartBackoff caps the restart back-off's doubling.
const maxRestartBackoff = 30 * time.Second

// longPollWait is how long one long-poll of GET /leader waits.
const longPollWait = 30 * time.Second

// Config is one supervisor.
type Config struct {
	// Command is the child's program and arguments; empty: hooks only.
	Command []string
	// API asks GET /leader every PollInterval and releases; its
	// http.Client's timeout bounds each request. LongPoll long-polls GET
	// /leader to learn of changes at once; its timeout must exceed 30 s.
	API, LongPoll *api.Client
	PollInterval  time.Duration
	// StopGrace is how long before the claim's end the child receives
	// SIGTERM (and how long it has after any other stop).
	StopGrace time.Duration
	// StartDelay is how long after this pod begins a term its child
	// starts: the previous leader's child may still be in its stop grace
	// when a release (POST /release, the sidecar's shutdown) let this pod
	// take over at once.
	StartDelay time.Duration
	OnExit     string
	// RestartBackoff is the first delay of --on-exit=restart; it doubles
	// up to maxRestartBackoff while the child keeps exiting.
	RestartBackoff time.Duration
	// OnStartLeading and OnStopLeading are shell commands run when this
	// pod's claim begins and ends; HookTimeout bounds each.
	OnStartLeading, OnStopLeading string
	HookTimeout                   time.Duration
	// WatchdogCommand starts a watchdog: the binary and WatchdogArg.
	WatchdogCommand []string
	Clock           Clock
	// Signals delivers the signals the supervisor received.
	Signals <-chan os.Signal
	// Stderr is the watchdog's standard error (its one line when it
	// kills); the supervisor itself logs through Run's context.
	Stderr io.Writer
	// Partition, if set, is partition mode's one partition term: the
	// supervisor serves it alone (partition.go) and exits when it is over.
	Partition *PartitionTerm
}

// supervisor runs one Config: the loop that gathers events for decide and
// carries out its actions (act.go).
type supervisor struct {
	cfg   Config
	rules rules
	log   klog.Logger
	hooks *hooks
	// child is the running child's processes (nil: none).
	child *process
	// foreign are the children this process had before it supervised
	// anything (a shell that exec'd it may have started some): never the
	// workload's.
	foreign map[int]bool
}

// Run supervises until the child's exit ends it (by the on-exit policy or
// after SIGTERM/SIGINT) and returns the exit code. It logs through ctx's
// logger (klog.FromContext).
func Run(ctx context.Context, cfg Config) int {
	s := &supervisor{cfg: cfg, rules: rulesOf(cfg), log: klog.FromContext(ctx)}
	return s.run(ctx)
}

func (s *supervisor) run(ctx context.Context) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.foreign = directChildren()
	if err := becomeSubreaper(); err != nil {
		s.log.Error(err, "Cannot become a child subreaper, so processes that leave the child's process group and are orphaned cannot be found at a stop")
	}
	// Every orphan below this process is its child now: reap them as they
	// exit, not only at a stop.
	orphans := make(chan os.Signal, 1)
	signal.Notify(orphans, syscall.SIGCHLD)
	defer signal.Stop(orphans)
	obs := make(chan Observation, 16)
	go s.poll(ctx, obs)
	go s.longPoll(ctx, obs)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	s.hooks = startHooks(s.cfg.HookTimeout, s.log)
	defer s.hooks.close()

	st := s.rules.initial()
	var ev event = wake{}
	for {
		now := s.cfg.Clock.Mono()
		var acts []action
		st, acts = s.rules.decide(st, ev, now)
		for _, a := range acts {
			if done, code := s.act(ctx, a); done {
				return code
			}
		}
		resetTimer(timer, s.rules.wakeAt(st, now), now)
		ev = s.next(ctx, obs, timer.C, orphans)
	}
}

// next waits for the next event.
func (s *supervisor) next(ctx context.Context, obs <-chan Observation, timer <-chan time.Time, orphans <-chan os.Signal) event {
	var done <-chan struct{}
	if s.child != nil {
		done = s.child.done
	}
	select {
	case o := <-obs:
		return observed{o}
	case <-timer:
		return wake{}
	case <-orphans:
		return orphaned{}
	case <-done:
		return s.childExited()
	case sig := <-s.cfg.Signals:
		return signaled{sig}
	case <-ctx.Done():
		return cancelled{}
	}
}

// resetTimer sets timer to fire at next (-1: in an hour, as good as never).
func resetTimer(timer *time.Timer, next, now Mono) {
	wait := time.Hour
	if next >= 0 {
		wait = time.Duration(next - now)
	}
	rearm(timer, wait)
}

// rearm makes timer fire after wait, whether or not it had fired.
func rearm(timer *time.Timer, wait time.Duration) {
	if !timer.Stop() {
		select {
		case <-timer.C:
		default:
		}
	}
	timer.Reset(wait)
}

// poll reads GET /leader every PollInterval: renewals move validUntil
// without a new revision, so only a fresh read extends the deadline.
func (s *supervisor) poll(ctx context.Context, out chan<- Observation) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case out <- s.observe(ctx, s.ask):
		case <-ctx.Done():
			return
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// longPoll learns of every change of revision at once, so that a start or
// a loss does not wait for the next poll.
func (s *supervisor) longPoll(ctx context.Context, out chan<- Observation) {
	var rev uint64
	for {
		o := s.observe(ctx, func(ctx context.Context, o *Observation) error {
			return s.askWait(ctx, rev, o)
		})
		select {
		case out <- o:
		case <-ctx.Done():
			return
		}
		if o.Err == nil {
			rev = o.Leader.Revision
			continue
		}
		select {
		case <-time.After(s.cfg.PollInterval):
		case <-ctx.Done():
			return
		}
	}
}

// observe asks for GET /leader and notes the request's send and the
// answer's arrival on both clocks. The arrival is taken when the answer's
// first byte comes, before its body is read and decoded: the sidecar wrote
// validForMs before that byte, and every moment after it would only make
// the window's upper end (Deadline) later.
func (s *supervisor) observe(ctx context.Context, ask func(context.Context, *Observation) error) Observation {
	clock := s.cfg.Clock
	var (
		mu       sync.Mutex
		recvWall time.Time
		recvMono Mono
		arrived  bool
	)
	trace := &httptrace.ClientTrace{GotFirstResponseByte: func() {
		wall, mono := clock.Wall(), clock.Mono()
		mu.Lock()
		defer mu.Unlock()
		recvWall, recvMono, arrived = wall, mono, true
	}}
	o := Observation{SentWall: clock.Wall(), SentMono: clock.Mono()}
	o.Err = ask(httptrace.WithClientTrace(ctx, trace), &o)
	mu.Lock()
	defer mu.Unlock()
	if !arrived {
		recvWall, recvMono = clock.Wall(), clock.Mono()
	}
	o.RecvWall, o.RecvMono = recvWall, recvMono
	return o
}

// exitCode is the child's exit code as a shell gives it: 128+n when killed
// by signal n.
func exitCode(err error) int {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return ExitRuntimeError
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func describe(err error) string {
	if err == nil {
		return "exit code 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + unix.SignalName(ws.Signal())
		}
		return "exit code " + strconv.Itoa(ee.ExitCode())
	}
	return err.Error()
}

// startFailureCode maps a failure to execute to a shell's exit code.
func startFailureCode(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return ExitNotFound
	}
	return ExitCannotExecute
}
