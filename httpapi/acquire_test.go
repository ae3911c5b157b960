package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

func TestAcquire(t *testing.T) {
	defaults := leadership.AcquireOptions{Attempts: 3, RetryDelay: 500 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		target string
		// leads is what the fake's Acquire answers; err its error.
		leads bool
		err   error
		// wantOpts is what Acquire must be called with (nil: not called).
		wantOpts   *leadership.AcquireOptions
		wantStatus int
	}{
		{name: "defaults, acquired", target: "/acquire", leads: true, wantOpts: &defaults, wantStatus: 200},
		{name: "contended", target: "/acquire", wantOpts: &defaults, wantStatus: 200},
		{
			name: "retries and delay", target: "/acquire?retries=5&retryDelay=2s",
			wantOpts: &leadership.AcquireOptions{Attempts: 5, RetryDelay: 2 * time.Second}, wantStatus: 200,
		},
		{
			name: "blocking", target: "/acquire?wait=30s", leads: true,
			wantOpts: &leadership.AcquireOptions{Attempts: 3, RetryDelay: 500 * time.Millisecond, Wait: 30 * time.Second}, wantStatus: 200,
		},
		{name: "observer", target: "/acquire", err: leadership.ErrObserver, wantOpts: &defaults, wantStatus: http.StatusConflict},
		{name: "unknown parameter", target: "/acquire?force=1", wantStatus: 400},
		{name: "wait with retries", target: "/acquire?wait=1s&retries=2", wantStatus: 400},
		{name: "zero retries", target: "/acquire?retries=0", wantStatus: 400},
		{name: "too many retries", target: "/acquire?retries=101", wantStatus: 400},
		{name: "retries not a number", target: "/acquire?retries=three", wantStatus: 400},
		{name: "negative delay", target: "/acquire?retryDelay=-1s", wantStatus: 400},
		{name: "delay too long", target: "/acquire?retryDelay=2m", wantStatus: 400},
		{name: "attempts outlast a call", target: "/acquire?retries=100&retryDelay=1m", wantStatus: 400},
		{name: "zero wait", target: "/acquire?wait=0s", wantStatus: 400},
		{name: "wait too long", target: "/acquire?wait=6m", wantStatus: 400},
		{name: "repeated parameter", target: "/acquire?retries=1&retries=2", wantStatus: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el := newFakeElection(followerState())
			called := false
			el.acquire = func(ctx context.Context, opts leadership.AcquireOptions) (leadership.State, bool, error) {
				called = true
				if tc.wantOpts != nil && opts != *tc.wantOpts {
					t.Errorf("Acquire(%+v), want %+v", opts, *tc.wantOpts)
				}
				if _, ok := ctx.Deadline(); !ok {
					t.Error("Acquire's context has no deadline")
				}
				s := followerState()
				if tc.leads {
					s = leaderState()
				}
				return s, tc.leads, tc.err
			}
			w := serve(NewAPIHandler(el, APIOptions{Acquire: defaults}), newRequest(t, http.MethodPost, tc.target))
			if called != (tc.wantOpts != nil) {
				t.Errorf("Acquire called: %v, want %v", called, tc.wantOpts != nil)
			}
			if tc.wantStatus != http.StatusOK {
				checkJSONError(t, w, tc.wantStatus)
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200: %s", w.Code, w.Body.String())
			}
			var got api.Acquire
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if got.Acquired != tc.leads || got.IsLeader != tc.leads {
				t.Errorf("POST %s = %s, want acquired and isLeader %v", tc.target, w.Body.String(), tc.leads)
			}
		})
	}
}

// TestAcquireMethod: only POST acquires.
func TestAcquireMethod(t *testing.T) {
	el := newFakeElection(followerState())
	el.acquire = func(context.Context, leadership.AcquireOptions) (leadership.State, bool, error) {
		t.Error("GET /acquire acquired")
		return followerState(), false, nil
	}
	w := serve(NewAPIHandler(el, APIOptions{}), newRequest(t, http.MethodGet, "/acquire"))
	checkJSONError(t, w, http.StatusMethodNotAllowed)
	if allow := w.Header().Get("Allow"); allow != "POST" {
		t.Errorf("Allow = %q, want POST", allow)
	}
}

// TestEventsLost: when a term of this pod ends, the stream sends "lost"
// with the reason ahead of the new state, once; a new term and other
// changes send no "lost".
func TestEventsLost(t *testing.T) {
	el := newFakeElection(leaderState())
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))
	resp, cancel := srv.connect(t, "client")
	defer cancel()
	r := &sseReader{t: t, br: bufio.NewReader(resp.Body)}
	if _, first := r.nextEvent(); first["isLeader"] != true {
		t.Fatalf("first event = %v, want the leader's state", first)
	}

	at := time.Date(2026, 11, 29, 8, 0, 10, 123456000, time.UTC)
	want := el.set(func(s *leadership.State) {
		*s = followerState()
		s.Holder = "pod-b"
		s.LastChange = leadership.Change{Reason: leadership.ReasonTakenOver, At: at, FencingToken: 7}
		s.LastLost = s.LastChange
		s.Revision = 20
	})
	ev := r.next()
	if ev.event != "lost" {
		t.Fatalf("event after losing = %q (%s), want lost", ev.event, ev.data)
	}
	var lost api.Lost
	if err := json.Unmarshal([]byte(ev.data), &lost); err != nil {
		t.Fatal(err)
	}
	if lost.Reason != "taken-over" || !lost.At.Equal(at) || lost.FencingToken != 7 || lost.Holder != "pod-b" {
		t.Errorf("lost = %+v, want taken-over at %v, token 7, holder pod-b", lost, at)
	}
	if _, got := r.nextEvent(); got["revision"] != float64(want.Revision) || got["isLeader"] != false {
		t.Errorf("event after lost = %v, want the new state", got)
	}

	// A change that ends no term of this pod: no "lost".
	want = el.set(func(s *leadership.State) { s.Holder = "pod-c" })
	if _, got := r.nextEvent(); got["revision"] != float64(want.Revision) {
		t.Errorf("event = %v, want revision %d", got, want.Revision)
	}
}

// TestEventsSharedBetweenStreams: streams share the text of a change's
// events (formatted once), but a stream that connects after a term ended
// gets the current state alone, not the "lost" another stream was sent
// with it.
func TestEventsSharedBetweenStreams(t *testing.T) {
	el := newFakeElection(leaderState())
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))
	respA, cancelA := srv.connect(t, "a")
	defer cancelA()
	a := &sseReader{t: t, br: bufio.NewReader(respA.Body)}
	a.nextEvent()
	lostState := el.set(func(s *leadership.State) {
		*s = followerState()
		s.LastChange = leadership.Change{Reason: leadership.ReasonTakenOver, At: time.Now(), FencingToken: 7}
		s.LastLost = s.LastChange
		s.Revision = 20
	})
	if ev := a.next(); ev.event != "lost" {
		t.Fatalf("stream a: event after losing = %q, want lost", ev.event)
	}
	a.nextEvent()

	respB, cancelB := srv.connect(t, "b")
	defer cancelB()
	b := &sseReader{t: t, br: bufio.NewReader(respB.Body)}
	if ev := b.next(); ev.event != "leader" || ev.id != strconv.FormatUint(lostState.Revision, 10) {
		t.Fatalf("stream b's first event = %q id %s, want leader at revision %d (no lost)", ev.event, ev.id, lostState.Revision)
	}

	// Both were told revision 20: the next change is the same text on both.
	want := el.set(func(s *leadership.State) { s.Holder = "pod-c" })
	evA, evB := a.next(), b.next()
	if evA != evB || evA.id != strconv.FormatUint(want.Revision, 10) {
		t.Errorf("events after the change: a %+v, b %+v; want the same, at revision %d", evA, evB, want.Revision)
	}
}
