package harness

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// TestHelperSpin is not a test: TestWaitStopped runs this binary with
// HARNESS_SPIN=1 to get a process whose threads are all busy on a CPU,
// the case in which SIGSTOP takes effect last.
func TestHelperSpin(t *testing.T) {
	if os.Getenv("HARNESS_SPIN") != "1" {
		return
	}
	for range runtime.GOMAXPROCS(0) + 1 {
		go func() {
			n := 0
			for {
				n++
			}
		}()
	}
	time.Sleep(time.Hour)
}

func TestWaitStopped(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperSpin$")
	cmd.Env = append(os.Environ(), "HARNESS_SPIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})

	// Running: not stopped, so the wait times out.
	if err := WaitStopped(pid, 100*time.Millisecond); err == nil {
		t.Fatal("WaitStopped on a running process returned nil")
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(pid, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if stopped, states, err := allThreadsStopped(pid); !stopped || err != nil {
		t.Fatalf("after WaitStopped: stopped=%v states=%q err=%v", stopped, states, err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := WaitStopped(pid, 100*time.Millisecond); err == nil {
		t.Fatal("WaitStopped after SIGCONT returned nil")
	}

	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := WaitStopped(pid, 100*time.Millisecond); err == nil {
		t.Fatal("WaitStopped on an exited process returned nil")
	}
}
