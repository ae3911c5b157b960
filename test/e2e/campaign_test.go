//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// acquire asks POST /acquire with query q and decodes the answer.
func (c *candidate) acquire(t testing.TB, q string) (api.Acquire, time.Duration) {
	t.Helper()
	start := time.Now()
	code, _, body, err := c.do("POST", "/acquire"+q, nil)
	took := time.Since(start)
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s: POST /acquire%s = %d %s %v", c.name, q, code, body, err)
	}
	var a api.Acquire
	if err := json.Unmarshal(body, &a); err != nil {
		t.Fatalf("%s: POST /acquire%s answered %s: %v", c.name, q, body, err)
	}
	if a.Acquired != a.IsLeader {
		t.Errorf("%s: POST /acquire%s says acquired %v but isLeader %v", c.name, q, a.Acquired, a.IsLeader)
	}
	return a, took
}

// release asks POST /release and decodes the answer.
func (c *candidate) release(t testing.TB) api.Release {
	t.Helper()
	code, _, body, err := c.do("POST", "/release", nil)
	if err != nil || code != http.StatusOK {
		t.Fatalf("%s: POST /release = %d %s %v", c.name, code, body, err)
	}
	var r api.Release
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("%s: POST /release answered %s: %v", c.name, body, err)
	}
	return r
}

// noLeaderFor fails the test if any of cs leads within d.
func noLeaderFor(t testing.TB, d time.Duration, cs ...*candidate) {
	t.Helper()
	err := holdsFor(d, 50*time.Millisecond, func() error {
		for _, c := range cs {
			if s, err := c.state(); err == nil && s.IsLeader {
				return fmt.Errorf("%s leads", c.name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("with nobody asking: %v", err)
	}
}

// TestManualCampaign: with --campaign=manual no pod campaigns until its app
// asks; POST /acquire takes a free Lease, answers acquired:false (after its
// attempts) while another pod holds it, and a blocking acquire returns as
// soon as the holder releases. A pod that releases stays out until asked
// again; releasing what one does not hold is a no-op.
// On both lease stores.
func TestManualCampaign(t *testing.T) {
	t.Parallel()
	onEachStore(t, testManualCampaign)
}

func testManualCampaign(t *testing.T, store leaseStore) {
	g := newGroup(t, 3, store.on(candidateOptions{extraArgs: []string{"--campaign=manual"}}))
	a, b, c := g.Members()[0], g.Members()[1], g.Members()[2]

	// Nobody asks: nobody leads, and the Lease is not even created.
	noLeaderFor(t, 2*leaseDuration, a, b, c)
	if _, err := store.client.CoordinationV1().Leases("default").Get(context.Background(), g.lease, metav1.GetOptions{}); err == nil {
		t.Errorf("the Lease exists though no pod asked for it")
	}

	// A blocking acquire on a Lease that does not exist: the pod creates it
	// without a holder and takes it once a lease duration has passed since
	// it first found the Lease missing (it cannot know that no one held an
	// earlier object of that name; docs/safety.md) — here, long ago.
	got, took := a.acquire(t, "?wait=20s")
	if !got.Acquired {
		t.Fatalf("%s: blocking acquire of a free Lease = %+v", a.name, got)
	}
	t.Logf("MEASURED blocking acquire of a missing Lease, found missing %v earlier: %v", 2*leaseDuration, took.Round(time.Millisecond))

	// Contention: false after its attempts, not an error.
	got, took = b.acquire(t, "?retries=3&retryDelay=300ms")
	if got.Acquired || got.Holder != a.name {
		t.Errorf("%s: acquire while %s leads = %+v, want acquired false and the holder", b.name, a.name, got)
	}
	if took < 600*time.Millisecond {
		t.Errorf("%s: 3 attempts 300ms apart answered after %v, want at least 600ms", b.name, took)
	}
	// Already leading: true at once.
	if got, took := a.acquire(t, ""); !got.Acquired || took > e2eSlack {
		t.Errorf("%s: acquire on the leader = %+v after %v, want true at once", a.name, got, took)
	}

	// A blocking acquire returns when the holder releases.
	type result struct {
		got  api.Acquire
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		got, took := b.acquire(t, "?wait=30s")
		done <- result{got, took}
	}()
	// Whether b's call has started when a releases or not, it must return
	// with b leading: a blocking acquire takes a free Lease at once.
	released := time.Now()
	if r := a.release(t); !r.Released || r.IsLeader {
		t.Errorf("%s: release of its own term = %+v, want released true", a.name, r)
	}
	select {
	case r := <-done:
		if !r.got.Acquired {
			t.Fatalf("%s: blocking acquire = %+v", b.name, r.got)
		}
		t.Logf("MEASURED blocking acquire: %s leads %v after %s released", b.name, time.Since(released).Round(time.Millisecond), a.name)
	case <-time.After(35 * time.Second):
		t.Fatal("the blocking acquire did not return")
	}
	if got := g.WaitLeader(giveUp); got != b {
		t.Errorf("leader = %s, want %s", got.name, b.name)
	}
	// Releasing what one does not hold: a no-op. The answer names the holder
	// a has seen, so wait until it has seen b.
	harnesstest.WaitFollowing(t, a, b)
	if r := a.release(t); r.Released || r.Holder != b.name {
		t.Errorf("%s: release without holding = %+v, want released false", a.name, r)
	}
	// a stays out after its release, c never asked: when b releases, no
	// one takes over.
	if r := b.release(t); !r.Released {
		t.Errorf("%s: release = %+v", b.name, r)
	}
	noLeaderFor(t, 2*leaseDuration, a, b, c)
	// The reasons: a released, b released; a acquired before.
	for _, cand := range []*candidate{a, b} {
		s, err := cand.state()
		if err != nil || s.LastChange == nil || s.LastChange.Reason != "released" || s.LastChange.IsLeader {
			t.Errorf("%s: lastChange = %+v (%v), want released", cand.name, s.LastChange, err)
		}
	}
	if s, err := c.state(); err != nil || s.LastChange != nil {
		t.Errorf("%s never led, but lastChange = %+v (%v)", c.name, s.LastChange, err)
	}
}

// TestAcquireEndsSitOut: in auto mode a pod that released sits out a lease
// duration; POST /acquire ends that early.
func TestAcquireEndsSitOut(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1, candidateOptions{})
	a := g.WaitLeader(giveUp)
	if r := a.release(t); !r.Released {
		t.Fatalf("release = %+v", r)
	}
	got, took := a.acquire(t, "?retries=1")
	if !got.Acquired {
		t.Fatalf("acquire after a release = %+v", got)
	}
	if took > leaseDuration/2 {
		t.Errorf("acquire took %v: the sit-out (%v) was not ended", took, leaseDuration)
	}
	t.Logf("MEASURED acquire during a sit-out: leads again after %v", took.Round(time.Millisecond))
	if got.LastChange == nil || got.LastChange.Reason != "acquired" {
		t.Errorf("lastChange = %+v, want acquired", got.LastChange)
	}
}

// sseStream reads one candidate's GET /events.
type sseStream struct {
	t      testing.TB
	events chan sseEvent
	cancel context.CancelFunc
}

type sseEvent struct{ name, data string }

func openEvents(t testing.TB, c *candidate) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, "GET", c.apiURL+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("%s: GET /events: %v", c.name, err)
	}
	s := &sseStream{t: t, events: make(chan sseEvent, 256), cancel: cancel}
	go func() {
		defer resp.Body.Close()
		defer close(s.events)
		var ev sseEvent
		buf := make([]byte, 0, 4096)
		one := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(one)
			buf = append(buf, one[:n]...)
			for {
				i := strings.Index(string(buf), "\n")
				if i < 0 {
					break
				}
				line := string(buf[:i])
				buf = buf[i+1:]
				switch {
				case line == "":
					if ev.name != "" {
						s.events <- ev
					}
					ev = sseEvent{}
				case strings.HasPrefix(line, "event: "):
					ev.name = strings.TrimPrefix(line, "event: ")
				case strings.HasPrefix(line, "data: "):
					ev.data = strings.TrimPrefix(line, "data: ")
				}
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(cancel)
	return s
}

// next returns the next event within timeout.
func (s *sseStream) next(timeout time.Duration) sseEvent {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		if !ok {
			s.t.Fatal("the event stream ended")
		}
		return ev
	case <-time.After(timeout):
		s.t.Fatalf("no event within %v", timeout)
	}
	return sseEvent{}
}

// waitLost reads events until a "lost" one and returns it, checking that
// the "leader" event right after it shows this pod not leading.
func (s *sseStream) waitLost(timeout time.Duration) api.Lost {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev := s.next(time.Until(deadline))
		if ev.name != "lost" {
			continue
		}
		var lost api.Lost
		if err := json.Unmarshal([]byte(ev.data), &lost); err != nil {
			s.t.Fatalf("lost event %q: %v", ev.data, err)
		}
		after := s.next(time.Second)
		var l api.Leader
		if after.name != "leader" || json.Unmarshal([]byte(after.data), &l) != nil || l.IsLeader || l.LastChange == nil || l.LastChange.Reason != lost.Reason {
			s.t.Errorf("the event after lost %+v is %s %s, want the leader state not leading, with that reason", lost, after.name, after.data)
		}
		return lost
	}
}

// TestLostReasons: each way a term ends is reported with its reason: in
// the answer's lastChange, as a "lost" event ahead of the new state, and in
// the metric by reason.
func TestLostReasons(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 2, candidateOptions{})
	leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
	ctx := context.Background()

	// lease-deleted: the Lease is deleted under the leader.
	leader := g.WaitLeader(giveUp)
	events := openEvents(t, leader)
	if err := leases.Delete(ctx, g.lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if lost := events.waitLost(10 * time.Second); lost.Reason != "lease-deleted" {
		t.Errorf("%s: lost after the Lease was deleted: %+v, want lease-deleted", leader.name, lost)
	}
	events.cancel()
	checkTransitions(t, leader, "lease-deleted", 1)

	// taken-over: another holder is written into the Lease (a hand edit).
	leader = g.WaitLeader(giveUp)
	events = openEvents(t, leader)
	intruder := "someone-else"
	// The leader renews every retry period: a renewal between the read and
	// the write makes the write a conflict, and the edit is made again on
	// the new version, as a person would.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		lease.Spec.HolderIdentity = &intruder
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if lost := events.waitLost(10 * time.Second); lost.Reason != "taken-over" || lost.Holder != intruder {
		t.Errorf("%s: lost after another holder was written: %+v, want taken-over by %s", leader.name, lost, intruder)
	}
	events.cancel()
	checkTransitions(t, leader, "taken-over", 1)

	// renew-deadline: the leader is frozen past its deadline; after it
	// resumes it reports the end of its term by time, and the new holder.
	leader = g.WaitLeader(giveUp)
	events = openEvents(t, leader)
	leader.signal(syscall.SIGSTOP)
	next := g.WaitLeader(takeoverBound, leader)
	leader.signal(syscall.SIGCONT)
	if lost := events.waitLost(10 * time.Second); lost.Reason != "renew-deadline" {
		t.Errorf("%s: lost after a freeze: %+v, want renew-deadline", leader.name, lost)
	}
	harnesstest.WaitFollowing(t, leader, next)
	checkTransitions(t, leader, "renew-deadline", 1)

	// released: POST /release.
	events = openEvents(t, next)
	if r := next.release(t); !r.Released {
		t.Fatalf("release = %+v", r)
	}
	if lost := events.waitLost(10 * time.Second); lost.Reason != "released" {
		t.Errorf("%s: lost after POST /release: %+v, want released", next.name, lost)
	}
	checkTransitions(t, next, "released", 1)
}

// checkTransitions waits until c's leader_elector_transitions_total for
// reason is at least want.
func checkTransitions(t *testing.T, c *candidate, reason string, want float64) {
	t.Helper()
	scrapeUntil(t, c, func(fams map[string]*dto.MetricFamily) bool {
		s := series(fams, "leader_elector_transitions_total", map[string]string{"reason": reason})
		return s != nil && s.GetCounter().GetValue() >= want
	})
}

// TestAcquireClient: the Go client's calls (docs/api.md, "From Go") against
// real sidecars with --campaign=manual.
func TestAcquireClient(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 2, candidateOptions{extraArgs: []string{"--campaign=manual"}})
	a, b := g.Members()[0].api(), g.Members()[1].api()
	ctx := context.Background()

	if got, err := a.WaitAcquire(ctx, 20*time.Second); err != nil || !got.Acquired || got.FencingToken == 0 {
		t.Fatalf("WaitAcquire = %+v, %v; want acquired with a token", got, err)
	}
	if got, err := b.TryAcquire(ctx, 2, 100*time.Millisecond); err != nil || got.Acquired || got.Holder != g.Members()[0].name {
		t.Errorf("TryAcquire while the other leads = %+v, %v; want not acquired, and the holder", got, err)
	}
	if alive, err := a.IsLeader(ctx); err != nil || !alive {
		t.Errorf("IsLeader on the leader = %v, %v", alive, err)
	}
	if alive, err := b.IsLeader(ctx); err != nil || alive {
		t.Errorf("IsLeader on the other = %v, %v", alive, err)
	}
	if r, err := b.Release(ctx); err != nil || r.Released {
		t.Errorf("Release on the other = %+v, %v; want released false", r, err)
	}
	if r, err := a.Release(ctx); err != nil || !r.Released {
		t.Errorf("Release on the leader = %+v, %v; want released true", r, err)
	}
	if got, err := b.Acquire(ctx); err != nil || !got.Acquired {
		t.Errorf("Acquire after the leader released = %+v, %v", got, err)
	}
}
