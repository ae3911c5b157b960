//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"net/http/httptrace"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestFirstElection: three candidates, one leader, and every view of it
// agrees: the API, text/plain, the compatibility answer, /readyz, metrics and
// the Lease itself; on both lease stores.
func TestFirstElection(t *testing.T) {
	t.Parallel()
	onEachStore(t, testFirstElection)
}

func testFirstElection(t *testing.T, store leaseStore) {
	start := time.Now()
	g := newGroup(t, 3, store.on(candidateOptions{}))
	leader := g.WaitLeader(giveUp)
	t.Logf("MEASURED first election: %v from starting 3 candidates to one leader", time.Since(start).Round(time.Millisecond))

	ls, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	if ls.Holder != leader.name || ls.Identity != leader.name || ls.LeaderSince.IsZero() || ls.ValidUntil.IsZero() {
		t.Errorf("leader state incomplete: %+v", ls)
	}
	if ls.LeaseDurationSeconds != int32(leaseDuration/time.Second) {
		t.Errorf("leaseDurationSeconds = %d, want %d", ls.LeaseDurationSeconds, leaseDuration/time.Second)
	}

	lease, err := store.client.CoordinationV1().Leases("default").Get(context.Background(), g.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *lease.Spec.HolderIdentity; got != leader.name {
		t.Errorf("Lease holder = %q, want %q", got, leader.name)
	}
	if got := int64(*lease.Spec.LeaseTransitions); got != ls.FencingToken {
		t.Errorf("Lease leaseTransitions = %d, API fencingToken = %d", got, ls.FencingToken)
	}

	for _, c := range g.Members() {
		// Followers learn the holder on their next retry.
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			s, err := c.state()
			return err == nil && s.Holder == leader.name && s.FencingToken == ls.FencingToken, nil
		})
		if err != nil {
			s, _ := c.state()
			t.Errorf("%s does not see %s as holder with token %d: %+v", c.name, leader.name, ls.FencingToken, s)
		}

		code, _, body, err := c.do("GET", "/leader", map[string]string{"Accept": "text/plain"})
		if err != nil || code != 200 || string(body) != leader.name+"\n" {
			t.Errorf("%s text/plain: %d %q %v", c.name, code, body, err)
		}
		code, _, body, err = c.do("GET", "/", nil)
		var compat map[string]string
		if err != nil || code != 200 || json.Unmarshal(body, &compat) != nil || compat["name"] != leader.name {
			t.Errorf("%s GET /: %d %q %v", c.name, code, body, err)
		}

		wantReady := 503
		if c == leader {
			wantReady = 200
		}
		if code, body, err := c.probe("/readyz"); err != nil || code != wantReady {
			t.Errorf("%s /readyz = %d %q %v, want %d", c.name, code, body, err, wantReady)
		}
		if code, _, err := c.probe("/healthz"); err != nil || code != 200 {
			t.Errorf("%s /healthz = %d %v", c.name, code, err)
		}
		_, metrics, err := c.probe("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		wantLeader := "0"
		if c == leader {
			wantLeader = "1"
		}
		for _, line := range []string{
			`leader_elector_is_leader{lease="` + g.lease + `",lease_namespace="default"} ` + wantLeader,
			`leader_elector_fencing_token{lease="` + g.lease + `",lease_namespace="default"} `,
			`leader_elector_leader_changes_total{lease="` + g.lease + `",lease_namespace="default"} `,
			// The process's own series carry no labels of ours.
			"\ngo_goroutines ",
		} {
			if !strings.Contains(metrics, line) {
				t.Errorf("%s /metrics lacks %q", c.name, line)
			}
		}
	}
	leaderMetrics := mustProbe(t, leader, "/metrics")
	for _, want := range []string{"leader_elector_renew_duration_seconds_count", "leader_elector_last_renew_timestamp_seconds"} {
		if !strings.Contains(leaderMetrics, want) {
			t.Errorf("leader /metrics lacks %s", want)
		}
	}
}

func mustProbe(t *testing.T, c *candidate, path string) string {
	t.Helper()
	_, body, err := c.probe(path)
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// termSpacing is the least time between two terms the graceful handover
// tests start: one a second is what a group sustains without waiting for
// the API server's clock (see election.newTermToken).
const termSpacing = time.Second

// TestGracefulHandover: SIGTERM to the leader flips its API at once, clears
// the Lease, exits 0, and a standby takes over; on both lease stores.
func TestGracefulHandover(t *testing.T) {
	t.Parallel()
	onEachStore(t, testGracefulHandover)
}

func testGracefulHandover(t *testing.T, s leaseStore) {
	g := newGroup(t, 3, s.on(candidateOptions{}))
	var handovers []time.Duration
	var previous *candidate
	var termBegan time.Time
	for round := range 3 {
		leader := g.WaitLeader(giveUp, previous)
		// A group starts at most one term a second beyond a short burst
		// (tokens stay near the API server's clock: election.newTermToken);
		// faster, the next term waits for the clock and client-go logs the
		// wait as a failed update. A handover a second is the rate this test
		// means to be healthy.
		time.Sleep(time.Until(termBegan.Add(termSpacing)))
		before, err := leader.state()
		if err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		leader.signal(syscall.SIGTERM)
		next := g.WaitLeader(handoverBound, leader)
		took := time.Since(sent)
		termBegan = time.Now()
		handovers = append(handovers, took)
		code, err := leader.waitExit(giveUp)
		if err != nil || code != 0 {
			t.Fatalf("round %d: leader %s exit code %d, %v", round, leader.name, code, err)
		}
		released := time.Since(sent)
		lease, err := s.client.CoordinationV1().Leases("default").Get(context.Background(), g.lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := *lease.Spec.HolderIdentity; h == leader.name {
			t.Errorf("round %d: Lease still names %s after it exited", round, leader.name)
		}
		if !strings.Contains(leader.log(), "Released lease") {
			t.Errorf("round %d: %s did not log its release", round, leader.name)
		}
		waitChangeLogged(t, leader, "Stopped leading", "shutdown")
		s.waitChangeRecorded(t, leader, g.lease, "stopped leading", "shutdown")
		after, _ := next.state()
		if after.FencingToken <= before.FencingToken {
			t.Errorf("round %d: fencing token %d after handover, was %d", round, after.FencingToken, before.FencingToken)
		}
		t.Logf("round %d: %s exited %v after SIGTERM; %s leads %v after SIGTERM (token %d → %d)", round, leader.name, released.Round(time.Millisecond), next.name, took.Round(time.Millisecond), before.FencingToken, after.FencingToken)
		// Replace the one that left so there are always standbys.
		g.Add(startCandidate(t, leader.name+"r", s.on(candidateOptions{lease: g.lease})))
		previous = leader
	}
	t.Logf("MEASURED graceful handover (SIGTERM → new leader answers isLeader): %v", handovers)
	// A standby that lost the race to take the released Lease says so in
	// an info line (v=2): in a healthy handover no candidate writes an
	// error line from client-go's elector.
	lost := 0
	for _, c := range g.Members() {
		for line := range strings.SplitSeq(c.log(), "\n") {
			if strings.HasPrefix(line, "E") && strings.Contains(line, "leaderelection.go") {
				t.Errorf("%s: an error line in a healthy handover: %s", c.name, line)
			}
			if strings.Contains(line, "a race to take it, lost") {
				lost++
			}
		}
	}
	t.Logf("races lost to take the released Lease, logged at v=2: %d", lost)
}

// TestCrashFailover: SIGKILL of the leader; a standby takes over once the
// Lease expires, within takeoverBound (it tries at the expiry, not at
// client-go's next retry), and never while the old claim may still run (the
// monitor checks that); on both lease stores.
func TestCrashFailover(t *testing.T) {
	t.Parallel()
	onEachStore(t, testCrashFailover)
}

func testCrashFailover(t *testing.T, s leaseStore) {
	g := newGroup(t, 3, s.on(candidateOptions{}))
	var failovers []time.Duration
	var previous *candidate
	for round := range 2 {
		leader := g.WaitLeader(giveUp, previous)
		killed := time.Now()
		leader.signal(syscall.SIGKILL)
		if _, err := leader.waitExit(giveUp); err != nil {
			t.Fatal(err)
		}
		next := g.WaitLeader(giveUp, leader)
		took := time.Since(killed)
		failovers = append(failovers, took)
		if took > takeoverBound {
			t.Errorf("round %d: failover took %v, bound %v (lease duration + e2eSlack)", round, took, takeoverBound)
		}
		t.Logf("round %d: %s killed; %s leads after %v", round, leader.name, next.name, took.Round(time.Millisecond))
		g.Add(startCandidate(t, leader.name+"r", s.on(candidateOptions{lease: g.lease})))
		previous = leader
	}
	t.Logf("MEASURED crash failover (SIGKILL → new leader): %v", failovers)
}

// TestFrozenLeader: the leader is stopped (SIGSTOP) while a standby takes
// over; on SIGCONT its very first answer is "not leader"; on both lease
// stores.
func TestFrozenLeader(t *testing.T) {
	t.Parallel()
	onEachStore(t, testFrozenLeader)
}

func testFrozenLeader(t *testing.T, s leaseStore) {
	g := newGroup(t, 2, s.on(candidateOptions{}))
	leader := g.WaitLeader(giveUp)
	frozen := time.Now()
	freezeOutsideTheLock(t, leader)
	next := g.WaitLeader(takeoverBound, leader)
	t.Logf("%s frozen; %s leads after %v", leader.name, next.name, time.Since(frozen).Round(time.Millisecond))

	// Send the request first, then resume: the answer is computed after the
	// process runs again, before it had any chance to renew or notice.
	type answer struct {
		s   api.Leader
		err error
	}
	answers := make(chan answer, 1)
	// The kernel accepts the connection and buffers the request for the
	// frozen process: resume it once the request is written.
	written := make(chan struct{})
	// Once: net/http sends a GET again on a new connection when the first
	// one is closed before any answer, and tells the trace each time.
	var wroteOnce sync.Once
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wroteOnce.Do(func() { close(written) }) },
	})
	go func() {
		s, err := leader.h.API().Leader(ctx)
		answers <- answer{s, err}
	}()
	select {
	case <-written:
	case a := <-answers:
		t.Fatalf("the frozen leader answered before it was resumed: %+v, %v", a.s, a.err)
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("the request never reached the frozen process's socket")
	}
	leader.signal(syscall.SIGCONT)
	a := <-answers
	if a.err != nil {
		t.Fatalf("first request after resume: %v", a.err)
	}
	if a.s.IsLeader {
		t.Errorf("first answer after resume claims leadership: %+v", a.s)
	}
	if s, err := next.state(); err != nil || !s.IsLeader {
		t.Errorf("new leader lost leadership after the old one resumed: %+v %v", s, err)
	}
	// The old leader goes back to being a follower and sees the new holder.
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		s, err := leader.state()
		return err == nil && s.Holder == next.name && !s.IsLeader, nil
	})
	if err != nil {
		t.Errorf("resumed leader does not follow %s", next.name)
	}
	if !leader.running() {
		t.Errorf("resumed leader exited")
	}
	// Its term ended by time, while it was frozen.
	waitChangeLogged(t, leader, "Stopped leading", "renew-deadline")
	s.waitChangeRecorded(t, leader, g.lease, "stopped leading", "renew-deadline")
}

// TestRelease: POST /release on the leader hands over; on a follower it
// does nothing (released: false); on both lease stores.
func TestRelease(t *testing.T) {
	t.Parallel()
	onEachStore(t, testRelease)
}

func testRelease(t *testing.T, s leaseStore) {
	g := newGroup(t, 3, s.on(candidateOptions{}))
	leader := g.WaitLeader(giveUp)
	var follower *candidate
	for _, c := range g.Members() {
		if c != leader {
			follower = c
			break
		}
	}
	// The answer names the holder the follower has seen: wait until it has
	// seen this one (the file store's watch can trail WaitLeader by a few
	// milliseconds; a run of the suite once asked in between and got an
	// empty holder).
	harnesstest.WaitFollowing(t, follower, leader)
	if r := follower.release(t); r.Released || r.Holder != leader.name {
		t.Errorf("POST /release on follower = %+v, want released false (a no-op) and the holder", r)
	}

	sent := time.Now()
	if r := leader.release(t); !r.Released || r.IsLeader {
		t.Errorf("POST /release on leader = %+v, want released true and not leading", r)
	}
	next := g.WaitLeader(handoverBound, leader)
	t.Logf("MEASURED release: %s leads %v after POST /release", next.name, time.Since(sent).Round(time.Millisecond))
	waitChangeLogged(t, leader, "Stopped leading", "released")
	s.waitChangeRecorded(t, leader, g.lease, "stopped leading", "released")
	waitChangeLogged(t, next, "Became leader", "acquired")
	s.waitChangeRecorded(t, next, g.lease, "became leader", "acquired")
	// The released pod sits out a lease duration, then is a candidate again.
	time.Sleep(leaseDuration + e2eSlack)
	if s, err := leader.state(); err != nil || s.IsLeader || s.Holder != next.name {
		t.Errorf("released pod state after sitting out: %+v %v", s, err)
	}
	if !leader.running() {
		t.Errorf("released pod exited")
	}
}

// TestRestartStartsNewTerm: a candidate that restarts with the same identity
// (a restarted container of the same pod) does not inherit its predecessor's
// term: the fencing token grows.
func TestRestartStartsNewTerm(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	first := startCandidate(t, "same-pod", candidateOptions{lease: lease})
	g.Add(first)
	g.WaitLeader(giveUp)
	before, _ := first.state()
	first.signal(syscall.SIGKILL)
	if _, err := first.waitExit(giveUp); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	second := startCandidate(t, "same-pod", candidateOptions{lease: lease})
	g.Add(second)
	early, err := second.state()
	if err != nil {
		t.Fatal(err)
	}
	if early.IsLeader {
		t.Errorf("restarted candidate claimed its predecessor's term at once: %+v", early)
	}
	g.WaitLeader(takeoverBound)
	after, _ := second.state()
	if after.FencingToken <= before.FencingToken {
		t.Errorf("restarted candidate inherited the term: token %d, predecessor had %d", after.FencingToken, before.FencingToken)
	}
	t.Logf("restarted candidate leads %v after restart with token %d (predecessor %d)", time.Since(restarted).Round(time.Millisecond), after.FencingToken, before.FencingToken)
}
