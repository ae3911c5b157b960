package supervisor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunSignalsEachProcessOnce: at a stop the child's group gets SIGTERM,
// and so does every process of its tree outside the group, each exactly
// once: Go apps that take a second SIGTERM as "exit now" (client-go's and
// controller-runtime's signal handlers) would otherwise skip their
// graceful stop. The child and a setsid grandchild count the SIGTERMs they
// receive and keep running; they are SIGKILLed when --stop-grace is over.
func TestRunSignalsEachProcessOnce(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		// setsid(1) is util-linux's, on every Debian machine: its absence
		// fails the test rather than skipping it in CI unseen.
		t.Fatal("setsid(1) is needed (util-linux) and is not on PATH")
	}
	f, srv := newFakeSidecar(t)
	dir := t.TempDir()
	pids, escaped := filepath.Join(dir, "pids"), filepath.Join(dir, "escaped")
	childLog, escapedLog := filepath.Join(dir, "child.log"), filepath.Join(dir, "escaped.log")
	script := `trap 'echo TERM >> ` + childLog + `' TERM
echo $$ >> ` + pids + `
setsid sh -c 'trap "echo TERM >> ` + escapedLog + `" TERM; echo $$ >> ` + escaped + `; while :; do sleep 0.02; done' &
while :; do sleep 0.02; done`
	t.Cleanup(func() {
		for _, pid := range readPids(t, escaped) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	const grace = 700 * time.Millisecond
	r := startRun(t, srv, OnExitRelease, grace, "sh", "-c", script)
	f.set(true, 31)
	poll(t, 5*time.Second, "the child and the escaped process start", func() bool {
		return len(readPids(t, pids)) == 1 && len(readPids(t, escaped)) == 1
	})
	child, esc := readPids(t, pids)[0], readPids(t, escaped)[0]

	f.set(false, 31)
	// Both ignore SIGTERM (they count it) and die of the SIGKILL at the
	// end of the grace.
	poll(t, grace+3*schedulingSlack, "the child and the escaped process are killed", func() bool {
		return !alive(child) && !alive(esc)
	})
	for _, tc := range []struct{ name, log string }{{"child", childLog}, {"escaped process", escapedLog}} {
		b, _ := os.ReadFile(tc.log)
		if n := strings.Count(string(b), "TERM"); n != 1 {
			t.Errorf("the %s received SIGTERM %d times, want exactly once", tc.name, n)
		}
	}
	r.signals <- syscall.SIGTERM
	r.exitCode(t, 5*time.Second)
}

// TestProcSignalRefusesAnotherProcess: a pid seen in a walk may belong to
// another process by the time it is signalled (the first exited, the pid
// was reused); the start time tells them apart, and the other process is
// left alone.
func TestProcSignalRefusesAnotherProcess(t *testing.T) {
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	p, ok := parseStat(cmd.Process.Pid, string(b))
	if !ok {
		t.Fatalf("cannot parse %q", b)
	}
	if p.ppid != os.Getpid() || p.start == 0 {
		t.Fatalf("parsed %+v: want ppid %d and a start time", p, os.Getpid())
	}
	reused := p
	reused.start++ // the process a walk saw under this pid
	if err := reused.signal(syscall.SIGKILL); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("signal to a pid now held by another process: %v, want ESRCH", err)
	}
	if !alive(cmd.Process.Pid) {
		t.Fatal("the process that reused the pid was killed")
	}
	if err := p.signal(syscall.SIGKILL); err != nil {
		t.Fatalf("signal to the process the walk saw: %v", err)
	}
	_ = cmd.Wait()
}

// TestRunReapsOrphansDuringATerm: the supervisor, a subreaper, adopts every
// orphan below it, so it must reap them while the child runs too, not only
// at a stop: a child that keeps starting short-lived background jobs
// (here one every 20 ms, orphaned at once) would otherwise fill the pid
// space with zombies over a long term.
func TestRunReapsOrphansDuringATerm(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	dir := t.TempDir()
	pids := filepath.Join(dir, "pids")
	script := `echo $$ >> ` + pids + `
while :; do (sleep 0.01 &); sleep 0.02; done`
	r := startRun(t, srv, OnExitRelease, 500*time.Millisecond, "sh", "-c", script)
	f.set(true, 41)
	poll(t, 5*time.Second, "the child starts", func() bool { return len(readPids(t, pids)) == 1 })
	// 2 s: a hundred orphans; every one is a zombie for a moment.
	deadline := time.Now().Add(2 * time.Second)
	most := 0
	for time.Now().Before(deadline) {
		most = max(most, zombieChildren(t))
		time.Sleep(50 * time.Millisecond) // sampling, not synchronisation
	}
	// Reaped at each SIGCHLD, so one zombie at a time unless the
	// supervisor's loop wakes late: the orphans of schedulingSlack. Without
	// reaping they pile up, a hundred in 2 s.
	const bound = int(schedulingSlack / (20 * time.Millisecond))
	if most > bound {
		t.Errorf("up to %d zombie children of the supervisor while the child ran, want at most %d", most, bound)
	}
	t.Logf("at most %d zombie children at once", most)
	f.set(false, 41)
	r.signals <- syscall.SIGTERM
	r.exitCode(t, 5*time.Second)
}

func zombieChildren(t *testing.T) int {
	all, err := processes()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range all {
		if p.ppid == os.Getpid() && p.zombie {
			n++
		}
	}
	return n
}
