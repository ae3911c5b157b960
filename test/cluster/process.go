package cluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leader-elector/leader-elector/test/harness"
)

// Process is one running component. Its output goes to an append-only log
// file, so a restarted component keeps one log with its whole history.
type Process struct {
	name    string
	logPath string
	logFrom int64 // size of the log before this run, so errors show only this run's output
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited and been reaped
	err     error         // Wait's result, readable after done is closed
}

// StartProcess starts bin with args in its own process group. The group lets
// signals reach anything the component might spawn, and Pdeathsig makes the
// kernel SIGKILL it if the test process dies without calling Stop (a
// panicking or killed `go test`), so no etcd or apiserver outlives the test.
func StartProcess(name, bin string, args []string, logPath string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	// The child holds its own descriptor; ours is only needed for the marker.
	defer logFile.Close()
	st, err := logFile.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening %s log: %w", name, err)
	}
	fmt.Fprintf(logFile, "=== %s starting at %s: %s %s\n", name, time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Stdin = nil
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := onSpawnThread(cmd.Start); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, logFrom: st.Size(), cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// spawnReqs feeds the spawn thread; see onSpawnThread.
var (
	spawnOnce sync.Once
	spawnReqs chan func()
)

// onSpawnThread runs f on one OS thread that lives as long as the test
// process. Pdeathsig fires when the *thread* that forked the child exits, not
// the process: forking from an arbitrary goroutine's thread could kill a
// component early if the runtime ever retired that thread (golang/go#27505).
func onSpawnThread(f func() error) error {
	spawnOnce.Do(func() {
		spawnReqs = make(chan func())
		go func() {
			// Never unlocked and never returns, so the thread is never retired.
			runtime.LockOSThread()
			for req := range spawnReqs {
				req()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnReqs <- func() { errc <- f() }
	return <-errc
}

// Pid is the process's id (also its process group's).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Stop sends SIGTERM to the process group and waits up to grace for the
// process to exit, then SIGKILLs the group. Safe on an exited process.
func (p *Process) Stop(grace time.Duration) {
	if p.Signal(syscall.SIGTERM) != nil {
		p.Kill()
		return
	}
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	p.Kill()
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the whole process group. For SIGSTOP it returns once
// the process is stopped, so a caller may rely on it not answering.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("%s is not running (%v)", p.name, p.err)
	}
	// A negative pid addresses the group, whose id is the leader's pid.
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("sending %v to %s: %w", sig, p.name, err)
	}
	if sig == syscall.SIGSTOP {
		if err := harness.WaitStopped(p.cmd.Process.Pid, 5*time.Second); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return nil
}

// Kill SIGKILLs the process group and waits until the process is reaped.
// SIGKILL also ends a SIGSTOPped process, so this works on a frozen one.
// It is safe to call on a process that has already exited.
func (p *Process) Kill() {
	if !p.Exited() {
		// ESRCH just means it died meanwhile; there is nothing else to do.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	<-p.done
}

// ExitError describes how the process ended, with the tail of its log.
func (p *Process) ExitError() error {
	return fmt.Errorf("%s exited early (%v); last lines of %s:\n%s", p.name, p.err, p.logPath, p.LogTail())
}

// LogTail returns roughly the last 30 lines this run wrote to its log, for
// error messages that should explain a failure without opening the log.
func (p *Process) LogTail() string {
	const maxBytes, maxLines = 8 << 10, 30
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	from := p.logFrom
	if st, err := f.Stat(); err == nil && st.Size()-from > maxBytes {
		from = st.Size() - maxBytes
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}
