package supervisor

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// hookRun is one hook to run: its command line and environment.
type hookRun struct {
	name, command string
	env           []string
}

// hooks runs --on-start-leading and --on-stop-leading commands one at a
// time, in the order of the transitions, on their own goroutine: the
// supervisor's loop never waits for a hook (and the sidecar, which renews,
// never sees one). A hook that outlives --hook-timeout is SIGKILLed with
// its process group.
type hooks struct {
	// mu guards pid, the running hook's process (0: none), and is held
	// while a hook starts, so that exclusive sees every hook process.
	mu      sync.Mutex
	pid     int
	timeout time.Duration
	queue   chan hookRun
	done    chan struct{}
	log     klog.Logger
}

// hookQueue bounds the transitions waiting for a slow hook; beyond it the
// oldest waiting are dropped (a later transition supersedes them).
const hookQueue = 16

func startHooks(timeout time.Duration, log klog.Logger) *hooks {
	h := &hooks{timeout: timeout, queue: make(chan hookRun, hookQueue), done: make(chan struct{}), log: log}
	go h.run()
	return h
}

func (h *hooks) fire(r hookRun) {
	for {
		select {
		case h.queue <- r:
			return
		default:
		}
		select {
		case old := <-h.queue:
			h.log.Info("Hook dropped: too many transitions while a hook ran", "hook", old.name, "command", old.command)
		default:
		}
	}
}

// exclusive runs f while no hook can start; running tells f whether pid
// is the hook process that runs (os/exec waits for it: not a leftover).
func (h *hooks) exclusive(f func(running func(pid int) bool)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(func(pid int) bool { return pid != 0 && pid == h.pid })
}

// close waits for the hooks already fired to end (each within its timeout).
func (h *hooks) close() {
	close(h.queue)
	<-h.done
}

func (h *hooks) run() {
	defer close(h.done)
	for r := range h.queue {
		h.runOne(r)
	}
}

func (h *hooks) runOne(r hookRun) {
	ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", r.command)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), r.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return unix.Kill(-cmd.Process.Pid, unix.SIGKILL) }
	start := time.Now()
	h.mu.Lock()
	err := cmd.Start()
	if err == nil {
		h.pid = cmd.Process.Pid
	}
	h.mu.Unlock()
	if err == nil {
		err = cmd.Wait()
		h.mu.Lock()
		h.pid = 0
		h.mu.Unlock()
	}
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		h.log.Info("Hook did not end within --hook-timeout: killed", "hook", r.name, "command", r.command, "timeout", h.timeout)
	case err != nil:
		h.log.Info("Hook failed", "hook", r.name, "command", r.command, "after", took, "result", describe(err))
	default:
		h.log.Info("Hook done", "hook", r.name, "command", r.command, "took", took)
	}
}
