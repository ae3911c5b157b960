package supervisor

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// process is one run of the command: the child and its watchdog.
type process struct {
	cmd     *exec.Cmd
	wd      *watchdog
	done    chan struct{}
	waitErr error
}

// act carries out one of decide's actions; done: the supervisor exits
// with code.
func (s *supervisor) act(ctx context.Context, a action) (done bool, code int) {
	switch a := a.(type) {
	case note:
		if a.isError {
			s.log.Error(nil, a.msg, a.kv...)
		} else {
			s.log.Info(a.msg, a.kv...)
		}
	case fireHook:
		s.fireHook(a.leading, a.term)
	case startChild:
		if code, ok := s.start(a.term, a.now); !ok {
			return true, code
		}
	case armWatchdog:
		s.child.wd.set(a.at)
	case stopChild:
		s.stop(a)
	case killChild:
		s.kill()
	case killRemains:
		s.killLeftovers(nil)
	case reapOrphaned:
		var roots []int
		if s.child != nil {
			roots = s.child.roots()
		}
		s.hooks.exclusive(func(running func(int) bool) {
			reapOrphans(roots, s.keep(running))
		})
	case forward:
		_ = s.child.cmd.Process.Signal(a.sig)
	case release:
		if s.cfg.Partition != nil {
			s.releasePartition(ctx)
		} else {
			s.release(ctx)
		}
	case abort:
		s.abort()
	case exit:
		return true, a.code
	}
	return false, 0
}

// fireHook queues --on-start-leading (leading) or --on-stop-leading.
func (s *supervisor) fireHook(leading bool, term Term) {
	name, command := "--on-stop-leading", s.cfg.OnStopLeading
	if leading {
		name, command = "--on-start-leading", s.cfg.OnStartLeading
	}
	if command == "" {
		return
	}
	s.hooks.fire(hookRun{name: name, command: command, env: s.childEnv(term)})
}

// childEnv is what the child and the hooks get about the term; in
// partition mode, also the partition and the group's N.
func (s *supervisor) childEnv(term Term) []string {
	env := termEnv(term)
	if pt := s.cfg.Partition; pt != nil {
		env = append(env, EnvPartition+"="+strconv.Itoa(pt.Partition), EnvPartitions+"="+strconv.Itoa(term.Partitions))
	}
	return env
}

// termEnv is what the child and the hooks get about the term.
func termEnv(term Term) []string {
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

// start starts the watchdog, then the child in the watchdog's process
// group. If the child cannot start it returns the exit code to end with.
func (s *supervisor) start(term Term, now Mono) (code int, ok bool) {
	wd, err := startWatchdog(s.cfg.WatchdogCommand, term.Deadline-Mono(killAhead), s.cfg.Stderr)
	if err != nil {
		s.log.Error(err, "Cannot guard the child")
		return ExitRuntimeError, false
	}
	cmd := exec.Command(s.cfg.Command[0], s.cfg.Command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), s.childEnv(term)...)
	// Pdeathsig: if the supervisor dies the child is killed at once (the
	// watchdog would kill it too, when it sees its stdin close).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: wd.cmd.Process.Pid, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		wd.finish()
		code := startFailureCode(err)
		s.log.Error(err, "Cannot execute the command", "command", s.cfg.Command[0], "exitCode", code)
		return code, false
	}
	p := &process{cmd: cmd, wd: wd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	s.child = p
	s.log.Info("Started the child", "pid", cmd.Process.Pid, "fencingToken", term.Token, "claimEndsIn", time.Duration(term.Deadline-now).Round(time.Millisecond))
	return 0, true
}

// childExited finishes the exited child's watchdog and tells how it
// ended.
func (s *supervisor) childExited() childExited {
	p := s.child
	s.child = nil
	fired := p.wd.finish()
	return childExited{pid: p.cmd.Process.Pid, code: exitCode(p.waitErr), result: describe(p.waitErr), fired: fired}
}

// stop sends a.sig to the child's process group, and to every process the
// child started that left the group (each process gets it once).
func (s *supervisor) stop(a stopChild) {
	p := s.child
	s.log.Info("Stopping the child", "reason", a.reason, "signal", unix.SignalName(a.sig), "pid", p.cmd.Process.Pid, "sigkillIn", a.killIn.Round(time.Millisecond))
	_ = unix.Kill(-p.wd.cmd.Process.Pid, a.sig)
	s.hooks.exclusive(func(running func(int) bool) {
		signalLeftovers(p.roots(), s.keep(running), p.wd.cmd.Process.Pid, a.sig)
	})
}

// kill SIGKILLs the child's process group and tree: its claim ends.
func (s *supervisor) kill() {
	p := s.child
	s.log.Info("The child did not exit by the end of the claim: SIGKILL to its process group", "pid", p.cmd.Process.Pid)
	_ = unix.Kill(-p.wd.cmd.Process.Pid, unix.SIGKILL)
	s.killLeftovers(p)
}

// abort kills the child at once and leaves nothing behind: only an
// embedding caller cancels Run.
func (s *supervisor) abort() {
	p := s.child
	_ = unix.Kill(-p.wd.cmd.Process.Pid, unix.SIGKILL)
	<-p.done
	p.wd.finish()
	s.child = nil
	s.killLeftovers(nil)
}

// keep tells the processes that are not the workload's among this
// process's children: the ones it had before, and the running hook.
func (s *supervisor) keep(running func(int) bool) func(int) bool {
	return func(pid int) bool { return s.foreign[pid] || running(pid) }
}

// killLeftovers SIGKILLs, and reaps, every process the workload left:
// those of p (nil: the child has exited and the watchdog is gone) and every
// orphan re-parented to this process (a subreaper), whatever its process
// group or session.
func (s *supervisor) killLeftovers(p *process) {
	var roots []int
	if p != nil {
		roots = p.roots()
	}
	var (
		n   int
		err error
	)
	s.hooks.exclusive(func(running func(int) bool) {
		n, err = killLeftovers(roots, s.keep(running))
	})
	if p == nil && n > 0 {
		s.log.Info("Killed the processes the child had left behind outside its process group", "count", n)
	}
	if err != nil {
		s.log.Error(err, "Killing the processes the child left")
	}
}

// roots are the processes the workload's tree hangs from while p runs.
func (p *process) roots() []int {
	return []int{p.cmd.Process.Pid, p.wd.cmd.Process.Pid}
}

func (s *supervisor) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.cfg.API.Release(ctx)
	switch {
	case err != nil:
		s.log.Error(err, "POST /release failed (--on-exit=release); the claim runs out on its own")
	case r.Released:
		s.log.Info("Released the leadership (--on-exit=release)")
	default:
		s.log.Info("This pod no longer led; nothing to release (--on-exit=release)")
	}
}

// signalName is a signal's name for the log ("SIGTERM").
func signalName(sig os.Signal) string {
	if s, ok := sig.(syscall.Signal); ok {
		return unix.SignalName(s)
	}
	return sig.String()
}
