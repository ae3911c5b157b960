package harness

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Signal sends sig to p. For SIGSTOP it returns once p is stopped (see
// WaitStopped), so a caller may rely on, and time from, a real freeze.
func Signal(p *os.Process, sig syscall.Signal) error {
	if err := p.Signal(sig); err != nil {
		return err
	}
	if sig == syscall.SIGSTOP {
		return WaitStopped(p.Pid, stopTimeout)
	}
	return nil
}

// stopTimeout is how long Signal waits for a SIGSTOP to take effect before
// it gives up: a give-up, not a bound (a stop takes milliseconds), generous
// for a loaded machine.
const stopTimeout = 5 * time.Second

// WaitStopped waits until every thread of pid is stopped by a signal.
//
// kill(SIGSTOP) returns once the signal is queued, not once it has taken
// effect: a thread running on another CPU goes on until it next enters the
// kernel. On a loaded machine that was long enough for a frozen API server to
// answer one more request (a test that asserted "a frozen server does not
// answer" failed in CI). A fault injector that promises "frozen" waits here.
func WaitStopped(pid int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	err := wait.PollUntilContextCancel(ctx, time.Millisecond, true, func(context.Context) (bool, error) {
		stopped, state, err := allThreadsStopped(pid)
		last = state
		return stopped, err
	})
	if err != nil {
		return fmt.Errorf("waiting up to %v for pid %d to stop (thread states %q): %w", timeout, pid, last, err)
	}
	return nil
}

// allThreadsStopped reads the state of each of pid's threads from
// /proc/<pid>/task/<tid>/stat. It also returns the states it saw.
func allThreadsStopped(pid int) (bool, string, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil {
		return false, "", err
	}
	if len(tasks) == 0 {
		return false, "", fmt.Errorf("pid %d has no threads in /proc (exited?)", pid)
	}
	var states []byte
	stopped := true
	for _, path := range tasks {
		b, err := os.ReadFile(path)
		if err != nil {
			// A thread that exits between the glob and the read is not running.
			continue
		}
		// The state follows the command name, which is in parentheses and
		// may itself contain ") ".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, "", fmt.Errorf("unexpected %s: %q", path, b)
		}
		state := b[i+2]
		states = append(states, state)
		if state != 'T' && state != 't' {
			stopped = false
		}
	}
	return stopped, string(states), nil
}
