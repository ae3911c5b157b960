package supervisor

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startGuarded starts a watchdog with deadline and a `sleep` in its
// process group, as the supervisor does.
func startGuarded(t *testing.T, deadline Mono) (*watchdog, *exec.Cmd) {
	t.Helper()
	wd, err := startWatchdog([]string{os.Args[0], WatchdogArg}, deadline, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pgid: wd.cmd.Process.Pid}
	if err := cmd.Start(); err != nil {
		wd.finish()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		wd.finish()
	})
	return wd, cmd
}

// TestWatchdogKillsTheGroupAtTheDeadline: a later deadline postpones the
// kill, and the kill comes at that deadline: not before it (exact), and
// not later than schedulingSlack after it, which is well short of the
// stdin closing at the test's end (the other way the group dies).
//
// The deadlines are set once the watchdog and the child run (their start
// can take longer than any fixed deadline on a loaded machine: the
// watchdog then fired before the child was in its group), and the earlier
// one lies schedulingSlack ahead, so that the watchdog has read the later
// one before the earlier one passes.
func TestWatchdogKillsTheGroupAtTheDeadline(t *testing.T) {
	const first = schedulingSlack
	const postponed = first + schedulingSlack
	wd, cmd := startGuarded(t, monoNow()+Mono(time.Hour))
	start := monoNow()
	wd.set(start + Mono(first))
	wd.set(start + Mono(postponed))
	poll(t, 5*time.Second, "the child dies", func() bool { return !alive(cmd.Process.Pid) })
	died := time.Duration(monoNow() - start)
	t.Logf("the child died %v after the start, %v after the deadline", died, died-postponed)
	if died < postponed {
		t.Fatalf("the child died %v after the start, before the postponed deadline %v", died, postponed)
	}
	if died > postponed+schedulingSlack {
		t.Fatalf("the child died %v after the start, want at the postponed deadline %v (+ %v scheduling slack)", died, postponed, schedulingSlack)
	}
	poll(t, 5*time.Second, "the watchdog is gone too", func() bool { return !alive(wd.cmd.Process.Pid) })
	if !wd.finish() {
		t.Fatal("the watchdog did not say it fired")
	}
}

func TestWatchdogKillsTheGroupWhenItsInputCloses(t *testing.T) {
	// The supervisor died (or is done with the child): the stdin closes.
	wd, cmd := startGuarded(t, monoNow()+Mono(time.Minute))
	if !alive(cmd.Process.Pid) {
		t.Fatal("the child is not running")
	}
	if wd.finish() {
		t.Fatal("the watchdog says it fired at its deadline")
	}
	poll(t, 5*time.Second, "the child dies", func() bool { return !alive(cmd.Process.Pid) })
}

func TestWatchdogSurvivesTheGroupsSIGTERM(t *testing.T) {
	wd, cmd := startGuarded(t, monoNow()+Mono(time.Minute))
	if err := syscall.Kill(-wd.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	poll(t, 5*time.Second, "the child dies of SIGTERM", func() bool { return !alive(cmd.Process.Pid) })
	time.Sleep(100 * time.Millisecond) // an absence: the watchdog must not die of it
	if !alive(wd.cmd.Process.Pid) {
		t.Fatal("the watchdog died of the SIGTERM meant for the workload")
	}
}

func TestWatchdogRefusesBadInput(t *testing.T) {
	for _, args := range [][]string{nil, {"soon"}, {"1", "2"}} {
		if code := RunWatchdog(args, nil, &syncBuffer{}, &syncBuffer{}); code != ExitBadInput {
			t.Errorf("%q: exit code %d", args, code)
		}
	}
}
