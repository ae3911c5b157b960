//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// fileStoreSlack covers, on top of the configured timings, what a file
// store handover adds: the release and take writes (two synced renames
// each), inotify's notification, and scheduling of race-detector builds on
// a loaded 2-core machine.
const fileStoreSlack = time.Second

// newFileGroup is newGroup on a lease file of the test's own (no control
// plane), under the invariant monitor.
func newFileGroup(t *testing.T, n int) (*group, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.json")
	return newGroup(t, n, candidateOptions{leaseFile: path}), path
}

// TestFileStoreElection: on --lease-store=file: one candidate of three
// leads; SIGTERM hands over gracefully (the token grows); SIGKILL is taken
// over once the lease expires; the monitor sees at most one claimant.
func TestFileStoreElection(t *testing.T) {
	g, path := newFileGroup(t, 3)
	var handovers []time.Duration
	var previous *candidate
	for round := range 3 {
		leader := g.WaitLeader(30*time.Second, previous)
		before, err := leader.state()
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		leader.signal(syscall.SIGTERM)
		next := g.WaitLeader(leaseDuration+fileStoreSlack, leader)
		handovers = append(handovers, time.Since(sent))
		if code, err := leader.waitExit(10 * time.Second); err != nil || code != 0 {
			t.Fatalf("round %d: %s exit code %d, %v", round, leader.name, code, err)
		}
		waitChangeLogged(t, leader, "Stopped leading", "shutdown")
		after, _ := next.state()
		if after.FencingToken <= before.FencingToken {
			t.Errorf("round %d: fencing token %d after handover, was %d", round, after.FencingToken, before.FencingToken)
		}
		g.Add(startCandidate(t, leader.name+"r", candidateOptions{lease: g.lease, leaseFile: path}))
		previous = leader
	}
	t.Logf("MEASURED file store graceful handover (SIGTERM → new leader answers isLeader): %v", handovers)

	leader := g.WaitLeader(30*time.Second, previous)
	killed := time.Now()
	leader.signal(syscall.SIGKILL)
	if _, err := leader.waitExit(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	bound := leaseDuration + time.Duration(1.2*float64(retryPeriod)) + fileStoreSlack
	next := g.WaitLeader(bound+5*time.Second, leader)
	if took := time.Since(killed); took > bound {
		t.Errorf("crash takeover took %v, bound %v", took, bound)
	} else {
		t.Logf("MEASURED file store crash takeover (SIGKILL → %s leads): %v", next.name, took.Round(time.Millisecond))
	}
}

// TestFileStoreFrozenLeader: a leader frozen (SIGSTOP) past its renew
// deadline while another takes over answers isLeader: false on resume,
// before it could write anything.
func TestFileStoreFrozenLeader(t *testing.T) {
	g, _ := newFileGroup(t, 2)
	leader := g.WaitLeader(30 * time.Second)
	freezeOutsideTheLock(t, leader)
	next := g.WaitLeader(leaseDuration+5*time.Second, leader)
	answers := make(chan api.Leader, 1)
	errs := make(chan error, 1)
	written := make(chan struct{})
	var once sync.Once
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { once.Do(func() { close(written) }) },
	})
	go func() {
		s, err := leader.h.API().Leader(ctx)
		answers <- s
		errs <- err
	}()
	select {
	case <-written:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the request never reached the frozen process's socket")
	}
	leader.signal(syscall.SIGCONT)
	a, err := <-answers, <-errs
	if err != nil || a.IsLeader {
		t.Errorf("first answer after resume: %+v, %v; want isLeader false", a, err)
	}
	if s, err := next.state(); err != nil || !s.IsLeader {
		t.Errorf("%s lost leadership after the old leader resumed: %+v %v", next.name, s, err)
	}
	waitChangeLogged(t, leader, "Stopped leading", "renew-deadline")
}

// freezeOutsideTheLock freezes c (SIGSTOP) at a moment it holds no file
// lock: frozen while it holds the lease file's lock (a write's check and
// renames, or a read), it stalls everyone's writes until it resumes, as
// docs/api.md says, and no takeover can happen. The test is of the other
// case, so a freeze that caught the lock is thawed and tried again.
func freezeOutsideTheLock(t *testing.T, c *candidate) {
	t.Helper()
	for range 50 {
		c.signal(syscall.SIGSTOP)
		if !holdsFlock(t, c.h.Pid()) {
			return
		}
		c.signal(syscall.SIGCONT)
		time.Sleep(7 * time.Millisecond)
	}
	t.Fatalf("%s held a file lock at each of 50 freezes", c.name)
}

// holdsFlock reports whether process pid holds a flock (/proc/locks).
func holdsFlock(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		// "1: FLOCK  ADVISORY  WRITE 9633 08:01:1234 0 EOF"; a waiter's
		// line has "->" after the number.
		f := strings.Fields(line)
		if len(f) >= 5 && f[1] == "FLOCK" && f[4] == strconv.Itoa(pid) {
			return true
		}
	}
	return false
}

// TestFileStoreReleaseAcquireSSE: POST /release hands over, a follower's
// SSE stream tells it that it leads, and POST /acquire after the sit-out
// takes the Lease back in a new term.
func TestFileStoreReleaseAcquireSSE(t *testing.T) {
	g, _ := newFileGroup(t, 2)
	leader := g.WaitLeader(30 * time.Second)
	var follower *candidate
	for _, c := range g.Members() {
		if c != leader {
			follower = c
		}
	}
	resp, err := http.Get(follower.apiURL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	leads := make(chan api.Leader, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var s api.Leader
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && json.Unmarshal([]byte(data), &s) == nil && s.IsLeader {
				leads <- s
				return
			}
		}
	}()
	before, _ := leader.state()
	sent := time.Now()
	if r := leader.release(t); !r.Released || r.IsLeader {
		t.Fatalf("POST /release on the leader = %+v", r)
	}
	select {
	case s := <-leads:
		if s.FencingToken <= before.FencingToken {
			t.Errorf("SSE: token %d after the release, was %d", s.FencingToken, before.FencingToken)
		}
		t.Logf("MEASURED file store release: the follower's SSE says it leads %v after POST /release", time.Since(sent).Round(time.Millisecond))
	case <-time.After(leaseDuration):
		t.Fatal("no SSE event with isLeader true within a lease duration of the release")
	}
	if r := follower.release(t); !r.Released {
		t.Fatalf("POST /release on the new leader = %+v", r)
	}
	a, _ := leader.acquire(t, "")
	if !a.Acquired || a.FencingToken <= before.FencingToken {
		t.Errorf("POST /acquire = %+v, want a new term above %d", a, before.FencingToken)
	}
}

// TestFileStoreSupervisor: leader-elector run on sidecars of the file
// store never runs two children, through a release, a frozen sidecar and a
// killed one.
func TestFileStoreSupervisor(t *testing.T) {
	g, _ := newFileGroup(t, 3)
	pidFile := filepath.Join(t.TempDir(), "children")
	m := startChildMonitor(t, pidFile)
	for _, c := range g.Members() {
		startSupervisor(t, c, []string{"--stop-grace=500ms"}, slowStopScript(pidFile))
	}
	current := m.waitNewChild(t, 0, leaseDuration+10*time.Second)
	for _, f := range []struct {
		name   string
		inject func(*candidate) func()
	}{
		{"graceful release", func(l *candidate) func() { l.release(t); return func() {} }},
		{"SIGSTOP of the sidecar", func(l *candidate) func() {
			l.signal(syscall.SIGSTOP)
			return func() { l.signal(syscall.SIGCONT) }
		}},
		{"SIGKILL of the sidecar", func(l *candidate) func() { l.h.Kill(); return func() {} }},
	} {
		leader := g.WaitLeader(leaseDuration + 10*time.Second)
		undo := f.inject(leader)
		next := m.waitNewChild(t, current.pid, leaseDuration+15*time.Second)
		undo()
		old := m.waitDead(t, current.pid, 5*time.Second)
		if margin := next.start - old.dead; margin <= 0 {
			t.Errorf("%s: the new child started %v before the old one was seen dead", f.name, -margin)
		}
		current = next
	}
	m.check(t)
}

// TestFileStoreBadFile: a lease file truncated, replaced by an older copy
// or made unreadable is refused with one clear error: the leader steps down by its renew
// deadline and no one leads until the file is deleted; then a new term
// starts with a higher token. The monitor sees no token going back.
func TestFileStoreBadFile(t *testing.T) {
	g, path := newFileGroup(t, 2)
	for _, f := range []struct {
		name, want string
		spoil      func(older []byte)
	}{
		{"truncated", "is corrupt", func([]byte) {
			b, _ := os.ReadFile(path)
			writeLeaseFile(t, path, b[:len(b)/2])
		}},
		{"replaced by an older copy", "went back", func(older []byte) { writeLeaseFile(t, path, older) }},
		// Root reads a file whatever its mode: a directory in its place is
		// a file no one can read.
		{"made unreadable", "is a directory", func([]byte) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		leader := g.WaitLeader(3 * leaseDuration)
		older, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := leader.state()
		// Let the leader renew once more, so that older is older.
		time.Sleep(2 * retryPeriod)
		f.spoil(older)
		spoiled := time.Now()
		err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, renewDeadline+retryPeriod+fileStoreSlack, true, func(context.Context) (bool, error) {
			s, err := leader.state()
			return err == nil && !s.IsLeader, nil
		})
		if err != nil {
			t.Fatalf("%s: %s still leads %v after the file was spoiled", f.name, leader.name, time.Since(spoiled))
		}
		t.Logf("%s: %s stepped down %v after the file was spoiled", f.name, leader.name, time.Since(spoiled).Round(time.Millisecond))
		noLeaderFor(t, leaseDuration, g.Members()...)
		if !strings.Contains(leader.log(), f.want) {
			t.Errorf("%s: the leader's log does not say the file %s", f.name, f.want)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		next := g.WaitLeader(3*leaseDuration + fileStoreSlack)
		if s, _ := next.state(); s.FencingToken <= before.FencingToken {
			t.Errorf("%s: token %d after the file was deleted, was %d", f.name, s.FencingToken, before.FencingToken)
		}
	}
}

func writeLeaseFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFileStoreFullDisk: the disk under the lease file fills up, simulated
// by a file size limit of 0 on every candidate (RLIMIT_FSIZE: each write of
// the store's temporary files then fails, with EFBIG where a full disk
// gives ENOSPC, on the same path). The leader's renewals fail: it steps
// down by its renew deadline and no one leads; once there is room again a
// new term starts with a higher token. The monitor sees no overlap and no
// token going back.
func TestFileStoreFullDisk(t *testing.T) {
	g, _ := newFileGroup(t, 2)
	leader := g.WaitLeader(3 * leaseDuration)
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	setFileSizeLimit := func(limit uint64) {
		t.Helper()
		for _, c := range g.Members() {
			// Only the soft limit: lowering and raising it back needs no
			// privilege.
			var old unix.Rlimit
			if err := unix.Prlimit(c.h.Pid(), unix.RLIMIT_FSIZE, nil, &old); err != nil {
				t.Fatal(err)
			}
			if err := unix.Prlimit(c.h.Pid(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: min(limit, old.Max), Max: old.Max}, nil); err != nil {
				t.Fatalf("%s: set its file size limit: %v", c.name, err)
			}
		}
	}
	t.Cleanup(func() { setFileSizeLimit(unix.RLIM_INFINITY) })
	setFileSizeLimit(0)
	full := time.Now()
	bound := renewDeadline + retryPeriod + fileStoreSlack
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		s, err := leader.state()
		return err == nil && !s.IsLeader, nil
	}); err != nil {
		t.Fatalf("%s still leads %v after the disk filled up (bound %v)", leader.name, time.Since(full), bound)
	}
	t.Logf("MEASURED file store, disk full: %s stepped down %v after it filled up", leader.name, time.Since(full).Round(time.Millisecond))
	noLeaderFor(t, leaseDuration, g.Members()...)

	setFileSizeLimit(unix.RLIM_INFINITY)
	next := g.WaitLeader(3*leaseDuration + fileStoreSlack)
	if s, _ := next.state(); s.FencingToken <= before.FencingToken {
		t.Errorf("token %d after the disk had room again, was %d", s.FencingToken, before.FencingToken)
	}
}
