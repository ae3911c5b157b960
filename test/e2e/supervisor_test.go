//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
)

// supervisor is one `leader-elector run` process, the entrypoint of an
// app container next to a candidate.
type supervisor struct {
	t       testing.TB
	sidecar *candidate
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	code    int
}

// startSupervisor runs `leader-elector run --url=<the candidate's API>
// args -- sh -c script`.
func startSupervisor(t testing.TB, sidecar *candidate, args []string, script string) *supervisor {
	t.Helper()
	s := &supervisor{t: t, sidecar: sidecar, logPath: filepath.Join(t.TempDir(), sidecar.name+"-run.log"), done: make(chan struct{})}
	log, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{"run", "--url=" + sidecar.apiURL}, args...), "--", "sh", "-c", script)
	s.cmd = exec.Command(binary, argv...)
	s.cmd.Env = harness.CleanEnv()
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.code = s.cmd.ProcessState.ExitCode()
		if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			s.code = 128 + int(ws.Signal())
		}
		log.Close()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
		_ = s.cmd.Process.Kill()
		<-s.done
		if t.Failed() {
			t.Logf("---- %s's supervisor log ----\n%s", sidecar.name, harness.TailFile(s.logPath, 60))
		}
		if b, _ := os.ReadFile(s.logPath); strings.Contains(string(b), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race in the supervisor", sidecar.name)
		}
	})
	return s
}

func (s *supervisor) signal(sig syscall.Signal) {
	s.t.Helper()
	if err := harness.Signal(s.cmd.Process, sig); err != nil {
		s.t.Fatal(err)
	}
}

// exitCode waits for the supervisor to exit.
func (s *supervisor) exitCode(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.code
	case <-time.After(timeout):
		s.t.Fatalf("%s's supervisor did not exit within %v", s.sidecar.name, timeout)
		return -1
	}
}

// workload is what the invariant monitor knows of one child: its pid and
// token (the child writes them to the shared file when it starts), when
// it started (the kernel's start time) and when it was first seen dead,
// both on CLOCK_BOOTTIME, the clock of /proc/<pid>/stat's start time.
type workload struct {
	pid   int
	token string
	// key is the partition, in partition mode ("" in leader mode): the
	// invariant holds per key.
	key       string
	start     time.Duration
	lastAlive time.Duration
	dead      time.Duration // 0 while alive
	deadWall  time.Time
}

// childMonitor watches the children's processes, not their logs: every
// 2 ms it reads the shared file for new pids and /proc for each known
// child's state, and records a violation whenever two are alive at once.
// A line is "<pid> <token>", or "<pid> <token> <partition>" for a
// partition's child: then the invariant is per partition.
type childMonitor struct {
	path string
	mu   sync.Mutex
	kids map[int]*workload
	// violations are the samples with two children alive.
	violations []string
	stop       chan struct{}
	stopped    chan struct{}
}

func startChildMonitor(t *testing.T, path string) *childMonitor {
	m := &childMonitor{path: path, kids: map[int]*workload{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go m.run()
	t.Cleanup(func() { close(m.stop); <-m.stopped })
	return m
}

func bootNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

// procState reads /proc/<pid>/stat: whether the process is alive (not
// gone, not a zombie) and its start time since boot (in clock ticks of
// 10 ms: USER_HZ is 100 on Linux).
func procState(pid int) (alive bool, start time.Duration) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false, 0
	}
	fields := strings.Fields(s[i+2:])
	// fields[0] is field 3 (state); field 22 (starttime) is fields[19].
	if len(fields) < 20 {
		return false, 0
	}
	ticks, _ := strconv.ParseInt(fields[19], 10, 64)
	return fields[0] != "Z" && fields[0] != "X", time.Duration(ticks) * 10 * time.Millisecond
}

func (m *childMonitor) run() {
	defer close(m.stopped)
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.sample()
	}
}

func (m *childMonitor) sample() {
	b, _ := os.ReadFile(m.path)
	now, wall := bootNow(), time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 && len(f) != 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || m.kids[pid] != nil {
			continue
		}
		alive, start := procState(pid)
		w := &workload{pid: pid, token: f[1], start: start}
		if len(f) == 3 {
			w.key = f[2]
		}
		if !alive {
			// It died between writing its line and this sample.
			w.dead, w.deadWall = now, wall
		}
		m.kids[pid] = w
	}
	living := map[string][]string{}
	for _, w := range m.kids {
		if w.dead != 0 {
			continue
		}
		if alive, _ := procState(w.pid); alive {
			w.lastAlive = now
			living[w.key] = append(living[w.key], fmt.Sprintf("%d (token %s)", w.pid, w.token))
		} else {
			w.dead, w.deadWall = now, wall
		}
	}
	for key, l := range living {
		if len(l) > 1 {
			m.violations = append(m.violations, fmt.Sprintf("at %v%s: %s", now, keyNote(key), strings.Join(l, ", ")))
		}
	}
}

func keyNote(key string) string {
	if key == "" {
		return ""
	}
	return " (partition " + key + ")"
}

// aliveTokens returns the tokens of the children alive, by partition.
func (m *childMonitor) aliveTokens() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for _, w := range m.kids {
		if w.dead == 0 {
			out[w.key] = append(out[w.key], w.token)
		}
	}
	return out
}

// alive returns the one child alive, or nil.
func (m *childMonitor) alive() *workload {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range m.kids {
		if w.dead == 0 {
			c := *w
			return &c
		}
	}
	return nil
}

func (m *childMonitor) get(pid int) workload {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *m.kids[pid]
}

// check fails the test on any sample with two children alive, and on any
// two children whose lives overlap: a child's life is from its kernel
// start time (rounded down to 10 ms: earlier than the truth) to the first
// sample that found it dead (later than the truth), so an overlap found
// is no artefact of the sampling.
func (m *childMonitor) check(t *testing.T) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, v := range m.violations {
		t.Errorf("two children alive at once %s", v)
	}
	byKey := map[string][]*workload{}
	for _, w := range m.kids {
		byKey[w.key] = append(byKey[w.key], w)
	}
	for key, kids := range byKey {
		sort.Slice(kids, func(i, j int) bool { return kids[i].start < kids[j].start })
		for i := 1; i < len(kids); i++ {
			prev, next := kids[i-1], kids[i]
			if prev.dead == 0 || prev.dead > next.start {
				t.Errorf("child %d (token %s%s) started at %v while child %d (token %s) had not been seen dead (%v)", next.pid, next.token, keyNote(key), next.start, prev.pid, prev.token, prev.dead)
			}
			// A partition's terms only grow (a child restarted within
			// its term keeps the token).
			p, _ := strconv.ParseInt(prev.token, 10, 64)
			n, _ := strconv.ParseInt(next.token, 10, 64)
			if key != "" && n < p {
				t.Errorf("partition %s: child %d ran under token %s after child %d under %s: the token went back", key, next.pid, next.token, prev.pid, prev.token)
			}
		}
	}
}

// waitNewChild waits for a child other than old to be alive and returns it.
func (m *childMonitor) waitNewChild(t *testing.T, old int, timeout time.Duration) workload {
	t.Helper()
	var w *workload
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		w = m.alive()
		return w != nil && w.pid != old, nil
	})
	if err != nil {
		t.Fatalf("no new child within %v (old %d)", timeout, old)
	}
	return *w
}

// waitDead waits until the monitor has seen pid dead.
func (m *childMonitor) waitDead(t *testing.T, pid int, timeout time.Duration) workload {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return m.get(pid).dead != 0, nil
	})
	if err != nil {
		t.Fatalf("child %d still alive after %v", pid, timeout)
	}
	return m.get(pid)
}

// childScript appends "<pid> <token>" to path and runs until stopped.
func childScript(path string) string {
	return `echo "$$ $LEADER_ELECTOR_FENCING_TOKEN" >> ` + path + `; while :; do sleep 0.05; done`
}

// slowStopScript is childScript for a child that takes 300 ms to stop on
// SIGTERM, within the 500 ms --stop-grace: the next leader's child must
// wait for it (--start-delay) when a release lets the next pod take over
// at once.
func slowStopScript(path string) string {
	return `trap 'sleep 0.3; exit 0' TERM; ` + childScript(path)
}

// TestSupervisorNeverTwoChildren: three candidates, each with a supervisor
// whose child runs only while its pod leads. Across a release, SIGKILL and
// SIGSTOP of the leader's sidecar, SIGSTOP of the leader's supervisor (its
// watchdog must kill the child), an API server freeze and kill, the monitor,
// reading process state, never sees two children alive, and each new
// child starts after the old one died: the margin is reported. On both
// lease stores; the file store has no API server to freeze or kill.
func TestSupervisorNeverTwoChildren(t *testing.T) { onEachStore(t, testSupervisorNeverTwoChildren) }

func testSupervisorNeverTwoChildren(t *testing.T, s leaseStore) {
	g := newGroup(t, 3, s.on(candidateOptions{}))
	pidFile := filepath.Join(t.TempDir(), "children")
	m := startChildMonitor(t, pidFile)
	sups := map[*candidate]*supervisor{}
	for _, c := range g.Members() {
		sups[c] = startSupervisor(t, c, []string{"--stop-grace=500ms"}, slowStopScript(pidFile))
	}
	current := m.waitNewChild(t, 0, giveUp)

	type fault struct {
		name string
		// inject returns what undoes it, called once the new child runs
		// (or, for the freeze, after the old one died and a lease
		// duration passed).
		inject func(leader *candidate) (undo func())
	}
	faults := []fault{
		{"graceful release", func(l *candidate) func() { l.release(t); return func() {} }},
		{"SIGSTOP of the sidecar", func(l *candidate) func() {
			freezeOutsideTheLock(t, l)
			return func() { l.signal(syscall.SIGCONT) }
		}},
		{"SIGSTOP of the supervisor", func(l *candidate) func() {
			sups[l].signal(syscall.SIGSTOP)
			return func() { sups[l].signal(syscall.SIGCONT) }
		}},
		{"API server freeze", func(*candidate) func() {
			if err := controlPlane.FreezeAPIServer(); err != nil {
				t.Fatal(err)
			}
			return func() {
				if err := controlPlane.ThawAPIServer(); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"API server kill", func(*candidate) func() {
			if err := controlPlane.KillAPIServer(); err != nil {
				t.Fatal(err)
			}
			return func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				if err := controlPlane.StartAPIServer(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"SIGKILL of the sidecar", func(l *candidate) func() { l.h.Kill(); return func() {} }},
	}
	var report []string
	for _, f := range faults {
		if s.file != "" && strings.HasPrefix(f.name, "API server") {
			continue
		}
		leader := g.WaitLeader(giveUp)
		injected := bootNow()
		undo := f.inject(leader)
		var next workload
		switch f.name {
		case "API server freeze", "API server kill", "SIGSTOP of the supervisor":
			// No one else can take over (the freeze) or the sidecar
			// still leads (the paused supervisor): the old child must die
			// by the claim's end, then the fault is undone.
			old := m.waitDead(t, current.pid, giveUp)
			if took := old.dead - injected; took > renewDeadline {
				t.Errorf("%s: the child died %v after the fault, beyond the renew deadline %v", f.name, took, renewDeadline)
			}
			if strings.HasPrefix(f.name, "API server") {
				time.Sleep(leaseDuration) // hold the outage: no child may start during it
			}
			undo()
			next = m.waitNewChild(t, current.pid, giveUp)
		default:
			next = m.waitNewChild(t, current.pid, giveUp)
			undo()
		}
		old := m.waitDead(t, current.pid, giveUp)
		margin := next.start - old.dead
		report = append(report, fmt.Sprintf("%s: old child %d (token %s) seen dead %v after the fault; new child %d (token %s) started %v after that",
			f.name, old.pid, old.token, (old.dead-injected).Round(time.Millisecond), next.pid, next.token, margin.Round(time.Millisecond)))
		if margin <= 0 {
			t.Errorf("%s: the new child started %v before the old one was seen dead", f.name, -margin)
		}
		current = next
	}
	m.check(t)
	for _, r := range report {
		t.Logf("MEASURED supervisor %s", r)
	}
}

// TestSupervisorChildMisbehaves: a child that ignores SIGTERM is killed
// before the claim ends; a command that cannot be executed ends the
// supervisor with a shell's code; a child that exits at once is restarted
// with back-off and no churn of leadership (--on-exit=restart), or ends
// the supervisor with its code after releasing (--on-exit=release).
func TestSupervisorChildMisbehaves(t *testing.T) {
	t.Run("ignores SIGTERM", func(t *testing.T) {
		g := newGroup(t, 1, candidateOptions{})
		pidFile := filepath.Join(t.TempDir(), "children")
		m := startChildMonitor(t, pidFile)
		leader := g.WaitLeader(giveUp)
		startSupervisor(t, leader, []string{"--stop-grace=500ms"}, `trap '' TERM; `+childScript(pidFile))
		child := m.waitNewChild(t, 0, giveUp)
		if err := controlPlane.FreezeAPIServer(); err != nil {
			t.Fatal(err)
		}
		thawed := false
		defer func() {
			if !thawed {
				_ = controlPlane.ThawAPIServer()
			}
		}()
		// The sidecar can no longer renew: its validUntil is final.
		s, err := leader.state()
		if err != nil || !s.IsLeader {
			t.Fatalf("the leader's state after the freeze: %+v, %v", s, err)
		}
		dead := m.waitDead(t, child.pid, giveUp)
		if !dead.deadWall.Before(s.ValidUntil.Time) {
			t.Errorf("the child was seen dead at %s, not before the claim's end %s", stamp(dead.deadWall), stamp(s.ValidUntil.Time))
		}
		t.Logf("MEASURED supervisor child ignoring SIGTERM: seen dead %v before the claim's end", s.ValidUntil.Sub(dead.deadWall).Round(time.Millisecond))
		if err := controlPlane.ThawAPIServer(); err != nil {
			t.Fatal(err)
		}
		thawed = true
		m.check(t)
	})

	t.Run("cannot execute", func(t *testing.T) {
		g := newGroup(t, 1, candidateOptions{})
		c := g.Members()[0]
		noExec := filepath.Join(t.TempDir(), "not-executable")
		if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			command string
			code    int
			line    string
		}{
			{"/no/such/command", 127, `leader-elector run: cannot execute "/no/such/command"`},
			{noExec, 126, "permission denied (exit code 126)"},
		} {
			out, err := exec.Command(binary, "run", "--url="+c.apiURL, "--", tc.command).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tc.code {
				t.Errorf("%s: %v, want exit code %d", tc.command, err, tc.code)
			}
			if !strings.Contains(string(out), tc.line) || strings.Count(string(out), "\n") != 1 {
				t.Errorf("%s: output %q, want one line with %q", tc.command, out, tc.line)
			}
		}
		out, err := exec.Command(binary, "run", "--url="+c.apiURL, "sleep", "1").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "want the command after --") {
			t.Errorf("no --: %v %q, want exit code 2 and a clear line", err, out)
		}
	})

	t.Run("exits at once, restart", func(t *testing.T) {
		g := newGroup(t, 1, candidateOptions{})
		leader := g.WaitLeader(giveUp)
		before, err := leader.state()
		if err != nil {
			t.Fatal(err)
		}
		starts := filepath.Join(t.TempDir(), "starts")
		sup := startSupervisor(t, leader, []string{"--stop-grace=500ms", "--start-delay=0s", "--on-exit=restart", "--restart-backoff=100ms"},
			`echo "$$ $LEADER_ELECTOR_FENCING_TOKEN" >> `+starts+`; exit 3`)
		count := func() int { b, _ := os.ReadFile(starts); return strings.Count(string(b), "\n") }
		err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, giveUp, true, func(context.Context) (bool, error) { return count() >= 1, nil })
		if err != nil {
			t.Fatal("the child never started")
		}
		first := time.Now()
		time.Sleep(3 * time.Second) // the measurement window
		// Back-off 100 ms doubling: starts at 0, 0.1, 0.3, 0.7, 1.5, 3.1 s.
		if n := count(); n < 4 || n > 6 {
			t.Errorf("%d starts in %v, want 4..6 (back-off from 100ms, doubling)", n, time.Since(first).Round(time.Millisecond))
		}
		after, err := leader.state()
		if err != nil || !after.IsLeader || after.FencingToken != before.FencingToken {
			t.Errorf("leadership churned: before %+v, after %+v (%v)", before, after, err)
		}
		t.Logf("MEASURED supervisor restart loop: %d starts in the first %v, one term (token %d)", count(), time.Since(first).Round(time.Millisecond), after.FencingToken)
		sup.signal(syscall.SIGTERM)
		if code := sup.exitCode(giveUp); code != 0 && code != 3 {
			t.Errorf("exit code %d after SIGTERM, want 0 (no child) or the child's 3", code)
		}
	})

	t.Run("exits at once, release", func(t *testing.T) {
		g := newGroup(t, 1, candidateOptions{})
		leader := g.WaitLeader(giveUp)
		sup := startSupervisor(t, leader, []string{"--stop-grace=500ms", "--start-delay=0s"}, `exit 3`)
		if code := sup.exitCode(giveUp); code != 3 {
			t.Errorf("exit code %d, want the child's 3", code)
		}
		s, err := leader.state()
		if err != nil || s.IsLeader || s.LastChange == nil || s.LastChange.Reason != "released" {
			t.Errorf("after --on-exit=release the sidecar says %+v (%v), want released", s, err)
		}
	})
}
