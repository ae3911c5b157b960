// Package supervisor is `leader-elector run -- CMD ARGS…`: it runs CMD
// only while this pod leads, as a client of the sidecar's application API
// on the same pod (package api), and kills it no later than the moment the
// claim ends. The sidecar stays the one elector; the supervisor needs no
// Kubernetes client and no RBAC. docs/supervisor.md is the reference: the
// guarantee, its bound and its limits.
package supervisor

import (
	"context"
	"errors"
	"fmt"
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
	Stderr  io.Writer
}

// child is one run of the command.
type child struct {
	cmd      *exec.Cmd
	wd       *watchdog
	token    int64
	started  Mono
	killAt   Mono
	stopping bool
	killed   bool
	done     chan struct{}
	waitErr  error
}

type supervisor struct {
	cfg Config
	log func(format string, args ...any)
	// foreign are the children this process had before it supervised
	// anything (a shell that exec'd it may have started some): never the
	// workload's.
	foreign map[int]bool
}

// Run supervises until the child's exit ends it (by the on-exit policy or
// after SIGTERM/SIGINT) and returns the exit code.
func Run(ctx context.Context, cfg Config) int {
	s := &supervisor{cfg: cfg, log: func(format string, args ...any) {
		fmt.Fprintf(cfg.Stderr, "%s leader-elector run: %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	}}
	return s.run(ctx)
}

func (s *supervisor) run(ctx context.Context) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	clock := s.cfg.Clock
	s.foreign = directChildren()
	if err := becomeSubreaper(); err != nil {
		s.log("cannot become a child subreaper, so processes that leave the child's process group and are orphaned cannot be found at a stop: %v", err)
	}
	// Every orphan below this process is its child now: reap them as they
	// exit, not only at a stop.
	orphaned := make(chan os.Signal, 1)
	signal.Notify(orphaned, syscall.SIGCHLD)
	defer signal.Stop(orphaned)
	obs := make(chan Observation, 16)
	go s.poll(ctx, obs)
	go s.longPoll(ctx, obs)

	var (
		term      Term
		c         *child
		restartAt Mono
		backoff   = s.cfg.RestartBackoff
		shutdown  bool
		checked   bool // --stop-grace was checked against a claim
		timer     = time.NewTimer(time.Hour)
	)
	defer timer.Stop()
	hk := startHooks(s.cfg.HookTimeout, s.log)
	defer hk.close()
	hookLeading := false
	for {
		now := clock.Mono()
		// Hooks follow the claim as the supervisor knows it: it begins
		// with a term, and ends when the sidecar says so or when it runs
		// out unrenewed.
		if valid := term.Valid(now) && !shutdown; valid != hookLeading {
			hookLeading = valid
			s.fireHook(hk, valid, term)
		}
		if c == nil && shutdown {
			return 0
		}
		if len(s.cfg.Command) > 0 && c == nil && term.Valid(now) && now >= restartAt {
			left := time.Duration(term.Deadline - now)
			if rd := RenewDeadline(term.Leader); !checked && rd > 0 {
				checked = true
				if s.cfg.StopGrace+killAhead >= rd {
					s.log("--stop-grace=%v does not fit in the claim: the sidecar's renew deadline is %v (validUntil − renewTime), and the child is killed 100ms before the claim ends; give a --stop-grace well below it", s.cfg.StopGrace, rd.Round(time.Millisecond))
					return ExitBadInput
				}
			}
			if left > s.cfg.StopGrace+killAhead {
				var code int
				c, code = s.start(term, now)
				if c == nil {
					return code
				}
			}
		}
		next := Mono(-1)
		if c != nil && !c.killed {
			own := term.Leading && term.Token == c.token
			if own && !c.stopping && !shutdown {
				c.killAt = term.Deadline - Mono(killAhead)
			}
			if !c.stopping {
				reason := ""
				switch {
				case !term.Leading:
					reason = "this pod stopped leading"
				case term.Token != c.token:
					reason = "a new term began"
				case now >= c.killAt-Mono(s.cfg.StopGrace):
					reason = "the claim ends within --stop-grace and was not renewed"
				}
				if reason != "" {
					s.stop(hk, c, syscall.SIGTERM, now, reason)
				}
			}
			c.wd.set(c.killAt)
			if now >= c.killAt {
				s.log("the child (pid %d) did not exit by the end of the claim: SIGKILL to its process group", c.cmd.Process.Pid)
				_ = unix.Kill(-c.wd.cmd.Process.Pid, unix.SIGKILL)
				s.killLeftovers(hk, c)
				c.killed = true
			} else {
				next = c.killAt
				if !c.stopping {
					next = c.killAt - Mono(s.cfg.StopGrace)
				}
			}
		}
		if c == nil && restartAt > now {
			next = restartAt
		}
		if hookLeading && (next < 0 || term.Deadline < next) {
			next = term.Deadline
		}
		wait := time.Hour
		if next >= 0 {
			wait = time.Duration(next - now)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)

		var done <-chan struct{}
		if c != nil {
			done = c.done
		}
		select {
		case o := <-obs:
			if term.Observe(o) {
				if term.Leading {
					s.log("this pod leads (fencing token %d, valid until %s); starting the child in %v (--start-delay)", term.Token, term.Leader.ValidUntil.UTC().Format(time.RFC3339Nano), s.cfg.StartDelay)
					backoff, restartAt = s.cfg.RestartBackoff, clock.Mono()+Mono(s.cfg.StartDelay)
				} else {
					s.log("this pod does not lead (holder %q)", term.Leader.Holder)
				}
			}
		case <-timer.C:
		case <-orphaned:
			var roots []int
			if c != nil {
				roots = c.roots()
			}
			hk.exclusive(func(running func(int) bool) {
				reapOrphans(roots, s.keep(running))
			})
		case <-done:
			code := exitCode(c.waitErr)
			fired := c.wd.finish()
			stopped := c.stopping || c.killed
			ran := time.Duration(clock.Mono() - c.started)
			s.log("the child (pid %d) exited: %s after %v", c.cmd.Process.Pid, describe(c.waitErr), ran.Round(time.Millisecond))
			// Whatever it started goes with it, in its group or not.
			s.killLeftovers(hk, nil)
			if !stopped && fired {
				// The watchdog killed it at the end of the last claim the
				// supervisor knew of: the supervisor was paused. That is a
				// stop, not the child's own exit; it starts again if the
				// claim is renewed.
				s.log("the watchdog killed it at the end of the claim: the supervisor was paused")
				stopped = true
			}
			c = nil
			switch {
			case shutdown:
				return code
			case stopped:
				continue
			case s.cfg.OnExit == OnExitRelease:
				s.release(ctx)
				return code
			case s.cfg.OnExit == OnExitExit:
				return code
			}
			// restart: back off, doubling while the child keeps exiting
			// soon after it starts; a run longer than the cap resets it.
			if ran > maxRestartBackoff {
				backoff = s.cfg.RestartBackoff
			}
			restartAt = clock.Mono() + Mono(backoff)
			s.log("--on-exit=restart: starting it again in %v if this pod still leads", backoff)
			backoff = min(2*backoff, maxRestartBackoff)
		case sig := <-s.cfg.Signals:
			if sig == syscall.SIGTERM || sig == syscall.SIGINT {
				if !shutdown {
					s.log("received %s: stopping", unix.SignalName(sig.(syscall.Signal)))
				}
				shutdown = true
				if c != nil && !c.killed && !c.stopping {
					s.stop(hk, c, sig.(syscall.Signal), clock.Mono(), "the supervisor is stopping")
				}
				continue
			}
			if c != nil && !c.killed {
				_ = c.cmd.Process.Signal(sig)
			}
		case <-ctx.Done():
			// Only an embedding caller cancels: leave nothing behind.
			if c != nil {
				_ = unix.Kill(-c.wd.cmd.Process.Pid, unix.SIGKILL)
				<-c.done
				c.wd.finish()
				s.killLeftovers(hk, nil)
			}
			return ExitRuntimeError
		}
	}
}

// fireHook queues --on-start-leading (leading) or --on-stop-leading.
func (s *supervisor) fireHook(hk *hooks, leading bool, term Term) {
	name, command := "--on-stop-leading", s.cfg.OnStopLeading
	if leading {
		name, command = "--on-start-leading", s.cfg.OnStartLeading
	}
	if command == "" {
		return
	}
	hk.fire(hookRun{name: name, command: command, env: childEnv(term)})
}

// childEnv is what the child and the hooks get about the term.
func childEnv(term Term) []string {
	l := term.Leader
	env := []string{
		EnvFencingToken + "=" + strconv.FormatInt(term.Token, 10),
		EnvLease + "=" + l.Lease.Namespace + "/" + l.Lease.Name,
		EnvHolder + "=" + l.Identity,
	}
	if !l.ValidUntil.IsZero() {
		// Not for a stop hook after the sidecar said the claim ended.
		env = append(env, EnvValidUntil+"="+l.ValidUntil.UTC().Format(time.RFC3339Nano))
	}
	return env
}

// stop sends sig to the child's process group, and to every process the
// child started that left the group (each process gets it once), and
// gives them --stop-grace, never beyond the claim.
func (s *supervisor) stop(hk *hooks, c *child, sig syscall.Signal, now Mono, reason string) {
	c.stopping = true
	c.killAt = min(c.killAt, now+Mono(s.cfg.StopGrace))
	c.wd.set(c.killAt)
	s.log("%s: %s to the child's process group (pid %d), SIGKILL in %v at the latest", reason, unix.SignalName(sig), c.cmd.Process.Pid, time.Duration(c.killAt-now).Round(time.Millisecond))
	_ = unix.Kill(-c.wd.cmd.Process.Pid, sig)
	hk.exclusive(func(running func(int) bool) {
		signalLeftovers(c.roots(), s.keep(running), c.wd.cmd.Process.Pid, sig)
	})
}

// keep tells the processes that are not the workload's among this
// process's children: the ones it had before, and the running hook.
func (s *supervisor) keep(running func(int) bool) func(int) bool {
	return func(pid int) bool { return s.foreign[pid] || running(pid) }
}

// killLeftovers SIGKILLs, and reaps, every process the workload left:
// those of c (nil: the child has exited and the watchdog is gone) and every
// orphan re-parented to this process (a subreaper), whatever its process
// group or session.
func (s *supervisor) killLeftovers(hk *hooks, c *child) {
	var roots []int
	if c != nil {
		roots = c.roots()
	}
	var (
		n   int
		err error
	)
	hk.exclusive(func(running func(int) bool) {
		n, err = killLeftovers(roots, s.keep(running))
	})
	if c == nil && n > 0 {
		s.log("killed %d processes the child had left behind (outside its process group)", n)
	}
	if err != nil {
		s.log("killing the processes the child left: %v", err)
	}
}

// roots are the processes the workload's tree hangs from while c runs.
func (c *child) roots() []int {
	return []int{c.cmd.Process.Pid, c.wd.cmd.Process.Pid}
}

// start starts the watchdog, then the child in the watchdog's process
// group. It returns the exit code to end with if the child cannot start.
func (s *supervisor) start(term Term, now Mono) (*child, int) {
	wd, err := startWatchdog(s.cfg.WatchdogCommand, term.Deadline-Mono(killAhead), s.cfg.Stderr)
	if err != nil {
		s.log("cannot guard the child: %v", err)
		return nil, ExitRuntimeError
	}
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv(term)...)
	// Pdeathsig: if the supervisor dies the child is killed at once (the
	// watchdog would kill it too, when it sees its stdin close).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: wd.cmd.Process.Pid, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		wd.finish()
		code := startFailureCode(err)
		s.log("cannot execute %q: %v (exit code %d)", s.cfg.Command[0], err, code)
		return nil, code
	}
	c := &child{cmd: cmd, wd: wd, token: term.Token, started: now, killAt: term.Deadline - Mono(killAhead), done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.done)
	}()
	s.log("started the child (pid %d) with fencing token %d; the claim ends in %v", cmd.Process.Pid, term.Token, time.Duration(term.Deadline-now).Round(time.Millisecond))
	return c, 0
}

func (s *supervisor) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.cfg.API.Release(ctx)
	switch {
	case err != nil:
		s.log("--on-exit=release: POST /release failed (the claim runs out on its own): %v", err)
	case r.Released:
		s.log("--on-exit=release: released the leadership")
	default:
		s.log("--on-exit=release: this pod no longer led; nothing to release")
	}
}

// poll reads GET /leader every PollInterval: renewals move validUntil
// without a new revision, so only a fresh read extends the deadline.
func (s *supervisor) poll(ctx context.Context, out chan<- Observation) {
	t := time.NewTicker(s.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case out <- s.observe(ctx, s.cfg.API.Leader):
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
		o := s.observe(ctx, func(ctx context.Context) (api.Leader, error) {
			return s.cfg.LongPoll.WaitLeader(ctx, rev, longPollWait)
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
func (s *supervisor) observe(ctx context.Context, ask func(context.Context) (api.Leader, error)) Observation {
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
	o.Leader, o.Err = ask(httptrace.WithClientTrace(ctx, trace))
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
