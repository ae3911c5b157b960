package notify

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leadership/leadershiptest"
	"github.com/leader-elector/leader-elector/ownership"
)

// receiver is an app that records the notifications it answers with 204;
// answer, if set, may block or return another status (0: 204).
type receiver struct {
	mu       sync.Mutex
	got      []received
	attempts map[uint64]int
	answer   func(w http.ResponseWriter, r *http.Request, revision uint64, attempt int) int
	srv      *httptest.Server
}

type received struct {
	revision    uint64
	body        string
	contentType string
}

func newReceiver(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, revision uint64, attempt int) int) *receiver {
	rc := &receiver{attempts: map[uint64]int{}, answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rev, err := strconv.ParseUint(r.Header.Get(RevisionHeader), 10, 64)
		if err != nil || r.Method != http.MethodPost {
			t.Errorf("notification %s with %s %q", r.Method, RevisionHeader, r.Header.Get(RevisionHeader))
		}
		rc.mu.Lock()
		rc.attempts[rev]++
		attempt := rc.attempts[rev]
		rc.mu.Unlock()
		if rc.answer != nil {
			if status := rc.answer(w, r, rev, attempt); status != 0 {
				w.WriteHeader(status)
				return
			}
		}
		if r.Context().Err() != nil {
			return // the sender gave up on this attempt
		}
		rc.mu.Lock()
		rc.got = append(rc.got, received{revision: rev, body: string(body), contentType: r.Header.Get("Content-Type")})
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// delivered returns the revisions answered with success, in order.
func (rc *receiver) delivered() []uint64 {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var revs []uint64
	for _, g := range rc.got {
		revs = append(revs, g.revision)
	}
	return revs
}

func (rc *receiver) waitDelivered(t *testing.T, n int) []uint64 {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(rc.delivered()) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d notifications delivered, want %d: %v", len(rc.delivered()), n, rc.delivered())
	}
	return rc.delivered()
}

func followerState() leadership.State { return leadershiptest.Follower() }

func leaderState() leadership.State { return leadershiptest.Leader() }

// notifierFixture runs a notifier of a fake election until the test ends.
type notifierFixture struct {
	el     *leadershiptest.Source
	n      *Notifier
	cancel context.CancelFunc
	done   chan struct{}
	// states are the states the election went through, by revision.
	states map[uint64]leadership.State
}

func startNotifier(t *testing.T, url string, opts Options) *notifierFixture {
	_, ctx := ktesting.NewTestContext(t)
	opts.URL = url
	f := &notifierFixture{el: leadershiptest.NewSource(followerState()), done: make(chan struct{}), states: map[uint64]leadership.State{}}
	f.states[f.el.Snapshot().Revision] = f.el.Snapshot()
	f.n = New(f.el, opts)
	ctx, f.cancel = context.WithCancel(ctx)
	go func() {
		defer close(f.done)
		f.n.Run(ctx)
	}()
	t.Cleanup(func() {
		f.cancel()
		<-f.done
	})
	f.waitQueued(t, f.el.Snapshot().Revision)
	return f
}

// change makes one change and waits until the notifier has read it, so
// that no two changes are coalesced.
func (f *notifierFixture) change(t *testing.T, change func(*leadership.State)) {
	t.Helper()
	s := f.el.Set(change)
	f.states[s.Revision] = s
	f.waitQueued(t, s.Revision)
}

// waitQueued waits until the notifier has queued revision rev.
func (f *notifierFixture) waitQueued(t *testing.T, rev uint64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		f.n.mu.Lock()
		defer f.n.mu.Unlock()
		return f.n.lastQueued == rev, nil
	})
	if err != nil {
		t.Fatalf("the notifier did not queue revision %d", rev)
	}
}

// waitCount waits until the counter of result reaches want.
func (f *notifierFixture) waitCount(t *testing.T, result string, want float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return f.count(result) == want, nil
	})
	if err != nil {
		t.Errorf("%s = %v, want %v", result, f.count(result), want)
	}
}

func toggle(s *leadership.State) {
	rev := s.Revision
	defer func() { s.Revision = rev }()
	if s.IsLeader {
		*s = followerState()
	} else {
		*s = leaderState()
	}
}

func (f *notifierFixture) count(result string) float64 {
	var m dto.Metric
	if err := f.n.results.WithLabelValues(result).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// wantBody is the body of the state with this revision as GET /leader
// answers it, without validForMs (httpapi's TestLeaderBodyIsTheAnswer keeps
// LeaderBody equal to the handler's answer).
func (f *notifierFixture) wantBody(t *testing.T, rev uint64) string {
	t.Helper()
	s, ok := f.states[rev]
	if !ok {
		t.Fatalf("no state with revision %d", rev)
	}
	body, err := httpapi.LeaderBody(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func TestNotifierDeliversEveryChangeInOrder(t *testing.T) {
	// The app is slow at first: the changes queue up behind the first.
	release := make(chan struct{})
	rc := newReceiver(t, func(_ http.ResponseWriter, _ *http.Request, rev uint64, _ int) int {
		if rev == 12 {
			<-release
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL+"/leader-changed", Options{})
	for range 10 {
		f.change(t, toggle)
	}
	close(release)
	got := rc.waitDelivered(t, 11)
	for i, rev := range got {
		if rev != uint64(12+i) {
			t.Fatalf("delivered revisions %v, want 12..22 in order", got)
		}
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, g := range rc.got {
		if want := f.wantBody(t, g.revision); g.body != want {
			t.Errorf("revision %d: body %q, want GET /leader's %q", g.revision, g.body, want)
		}
		if g.contentType != "application/json" {
			t.Errorf("revision %d: Content-Type %q", g.revision, g.contentType)
		}
	}
	f.waitCount(t, notifyDelivered, 11)
}

func TestNotifierRetriesThenGivesUp(t *testing.T) {
	rc := newReceiver(t, func(_ http.ResponseWriter, _ *http.Request, rev uint64, attempt int) int {
		switch {
		case rev == 12: // always failing
			return http.StatusInternalServerError
		case rev == 13 && attempt < 3: // fails twice, then succeeds
			return http.StatusServiceUnavailable
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{Retries: 2})
	f.change(t, toggle)
	f.change(t, toggle)
	got := rc.waitDelivered(t, 2)
	if got[0] != 13 || got[1] != 14 {
		t.Errorf("delivered %v, want [13 14]", got)
	}
	rc.mu.Lock()
	attempts := map[uint64]int{12: rc.attempts[12], 13: rc.attempts[13], 14: rc.attempts[14]}
	rc.mu.Unlock()
	if attempts[12] != 3 || attempts[13] != 3 || attempts[14] != 1 {
		t.Errorf("attempts %v, want 3 (one and two retries), 3, 1", attempts)
	}
	f.waitCount(t, notifyDelivered, 2)
	f.waitCount(t, notifyFailed, 1)
}

func TestNotifierTimeout(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	rc := newReceiver(t, func(_ http.ResponseWriter, r *http.Request, rev uint64, _ int) int {
		if rev == 12 {
			select { // an app that never answers this one
			case <-stuck:
			case <-r.Context().Done():
			}
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{Timeout: 100 * time.Millisecond, Retries: 1})
	f.change(t, toggle)
	start := time.Now()
	got := rc.waitDelivered(t, 1)
	if got[0] != 13 {
		t.Errorf("delivered %v, want [13]", got)
	}
	// Two attempts of 100ms and a backoff of about 100ms: well under a
	// second, not the receiver's forever.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the next notification took %v", took)
	}
	rc.mu.Lock()
	attempts := rc.attempts[12]
	rc.mu.Unlock()
	if attempts != 2 || f.count(notifyFailed) != 1 {
		t.Errorf("attempts %d failed %v, want 2 and 1", attempts, f.count(notifyFailed))
	}
}

func TestNotifierQueueOverflow(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ http.ResponseWriter, _ *http.Request, rev uint64, _ int) int {
		if rev == 12 {
			<-release
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{QueueSize: 2})
	// Wait until revision 12 is in flight, so the queue is empty.
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.attempts[12] == 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 { // 13..17; 13..15 are overtaken
		f.change(t, toggle)
	}
	close(release)
	got := rc.waitDelivered(t, 3)
	if len(got) != 3 || got[0] != 12 || got[1] != 16 || got[2] != 17 {
		t.Errorf("delivered %v, want [12 16 17]", got)
	}
	if f.count(notifyDropped) != 3 {
		t.Errorf("dropped = %v, want 3", f.count(notifyDropped))
	}
}

func TestNotifierFlushesAtShutdown(t *testing.T) {
	release := make(chan struct{})
	rc := newReceiver(t, func(_ http.ResponseWriter, _ *http.Request, rev uint64, _ int) int {
		if rev == 12 {
			<-release
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{})
	f.change(t, toggle) // leader
	// Shutdown: the elector stops leading; then the notifier is stopped.
	s := f.el.Set(toggle)
	f.states[s.Revision] = s
	f.cancel()
	close(release)
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if got := rc.delivered(); len(got) != 3 || got[2] != s.Revision {
		t.Errorf("delivered %v before Run returned, want 12, 13 and the last state %d", got, s.Revision)
	}
}

func TestNotifierShutdownIsBounded(t *testing.T) {
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	rc := newReceiver(t, func(_ http.ResponseWriter, r *http.Request, _ uint64, _ int) int {
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{Timeout: 30 * time.Second, FlushTimeout: 200 * time.Millisecond})
	f.change(t, toggle)
	start := time.Now()
	f.cancel()
	select {
	case <-f.done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within its flush timeout")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run took %v to stop with a flush timeout of 200ms", took)
	}
	if n := f.count(notifyFailed); n != 2 {
		t.Errorf("failed = %v, want 2 (the one in flight and the one queued)", n)
	}
}

// The client connects to loopback addresses only, whatever the URL names.
func TestNotifierRefusesOtherAddresses(t *testing.T) {
	n := New(leadershiptest.NewSource(followerState()), Options{URL: "http://192.0.2.1:80/", Timeout: time.Second})
	err := n.attempt(context.Background(), notification{revision: 1, body: []byte("{}\n")})
	if err == nil || !containsAll(err.Error(), "not a loopback address") {
		t.Errorf("attempt to 192.0.2.1: %v, want a refusal", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// A redirect is an answer, not a success, and is not followed: the app
// cannot send the sidecar's POSTs elsewhere.
func TestNotifierDoesNotFollowRedirects(t *testing.T) {
	elsewhere := newReceiver(t, nil)
	rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request, rev uint64, _ int) int {
		if rev == 12 {
			w.Header().Set("Location", elsewhere.srv.URL)
			return http.StatusTemporaryRedirect
		}
		return 0
	})
	f := startNotifier(t, rc.srv.URL, Options{})
	f.change(t, toggle)
	if got := rc.waitDelivered(t, 1); got[0] != 13 {
		t.Errorf("delivered %v, want [13]", got)
	}
	if got := elsewhere.delivered(); len(got) != 0 {
		t.Errorf("the redirect was followed: %v", got)
	}
	if f.count(notifyFailed) != 1 {
		t.Errorf("failed = %v, want 1", f.count(notifyFailed))
	}
}

// partitionsSource is a fake partition member: Set makes a change, with the
// next revision, and wakes the watchers.
type partitionsSource struct {
	mu      sync.Mutex
	s       ownership.State
	changed chan struct{}
}

func (p *partitionsSource) Watch() (ownership.State, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s, p.changed
}

func (p *partitionsSource) Set(change func(*ownership.State)) ownership.State {
	p.mu.Lock()
	defer p.mu.Unlock()
	// Each state keeps its own Owned: the states handed out stay as they were.
	p.s.Owned = slices.Clone(p.s.Owned)
	change(&p.s)
	p.s.Revision++
	close(p.changed)
	p.changed = make(chan struct{})
	return p.s
}

// TestPartitionsNotifier: in partition mode each notification is the GET
// /partitions JSON of its revision, delivered in revision order, and the
// state at shutdown is delivered last.
func TestPartitionsNotifier(t *testing.T) {
	rc := newReceiver(t, nil)
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	src := &partitionsSource{s: ownership.State{Namespace: "default", Name: "g", Identity: "pod-a", Partitions: 4, EffectivePartitions: 4, Members: 1, Member: true, Revision: 1}, changed: make(chan struct{})}
	n := NewPartitions(src, Options{URL: rc.srv.URL})
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.Run(ctx)
	}()
	want := map[uint64]ownership.State{1: src.s}
	waitQueued := func(rev uint64) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			n.mu.Lock()
			defer n.mu.Unlock()
			return n.lastQueued == rev, nil
		}); err != nil {
			t.Fatalf("revision %d never queued", rev)
		}
	}
	waitQueued(1)
	for i := range 4 {
		s := src.Set(func(s *ownership.State) {
			s.Owned = append(s.Owned, ownership.Owned{Partition: i, FencingToken: int64(10 + i)})
		})
		want[s.Revision] = s
		waitQueued(s.Revision)
	}
	// The last change comes as the notifier stops: it is delivered too.
	last := src.Set(func(s *ownership.State) { s.Owned[0].Draining = true })
	want[last.Revision] = last
	cancel()
	<-done

	got := rc.delivered()
	if len(got) != len(want) {
		t.Fatalf("delivered revisions %v, want %d of them", got, len(want))
	}
	for i, g := range rc.got {
		if i > 0 && g.revision <= rc.got[i-1].revision {
			t.Errorf("revision %d delivered after %d: out of order", g.revision, rc.got[i-1].revision)
		}
		body, err := httpapi.PartitionsBody(want[g.revision])
		if err != nil {
			t.Fatal(err)
		}
		if g.body != string(body) || g.contentType != "application/json" {
			t.Errorf("revision %d: body %q (%s), want GET /partitions' %q", g.revision, g.body, g.contentType, body)
		}
		var decoded api.Partitions
		if err := json.Unmarshal([]byte(g.body), &decoded); err != nil || decoded.Revision != g.revision {
			t.Errorf("revision %d: body does not decode as api.Partitions of its revision (%v, revision %d)", g.revision, err, decoded.Revision)
		}
	}
}
