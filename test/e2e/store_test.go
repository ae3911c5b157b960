//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/filelease"
)

// leaseStore is where a test's candidates elect: the control plane's
// Lease API, or a lease file (--lease-store=file:). Its client reads and
// writes that store's Leases, for the test's own checks and set-up; on a
// file it is the filelease package the sidecar itself serves the file
// with.
type leaseStore struct {
	name   string
	file   string // "" on the API server
	client kubernetes.Interface
}

// kubeStore is the control plane's Lease API.
func kubeStore() leaseStore {
	return leaseStore{name: "kubernetes", client: controlPlane.AdminClient()}
}

// fileStore is a lease file of the test's own.
func fileStore(t *testing.T) leaseStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.json")
	cfg, stop, err := filelease.Start(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return leaseStore{name: "file", file: path, client: kubernetes.NewForConfigOrDie(cfg)}
}

// on returns o electing through this store.
func (s leaseStore) on(o candidateOptions) candidateOptions {
	o.leaseFile = s.file
	return o
}

// waitChangeRecorded is waitChangeRecorded on the Kubernetes store; the
// file store has no Events to record a change in (--events is refused
// there), so there it checks nothing.
func (s leaseStore) waitChangeRecorded(t *testing.T, c *candidate, lease, what, reason string) {
	t.Helper()
	if s.file == "" {
		waitChangeRecorded(t, c, lease, what, reason)
	}
}

// onEachStore runs test on both stores, as subtests named after them: the
// application API's semantics are the same on both (docs/api.md, "Lease
// stores").
func onEachStore(t *testing.T, test func(t *testing.T, s leaseStore)) {
	t.Run("kubernetes", func(t *testing.T) { test(t, kubeStore()) })
	t.Run("file", func(t *testing.T) { test(t, fileStore(t)) })
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

// TestReleaseAcquireSSE: POST /release hands over, a follower's SSE stream
// tells it that it leads, and POST /acquire after the sit-out takes the
// Lease back in a new term; on both lease stores.
func TestReleaseAcquireSSE(t *testing.T) {
	t.Parallel()
	onEachStore(t, testReleaseAcquireSSE)
}

func testReleaseAcquireSSE(t *testing.T, store leaseStore) {
	g := newGroup(t, 2, store.on(candidateOptions{}))
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
		t.Logf("MEASURED %s store release: the follower's SSE says it leads %v after POST /release", store.name, time.Since(sent).Round(time.Millisecond))
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
