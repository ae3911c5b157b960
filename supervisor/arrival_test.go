package supervisor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// TestDeadlineAfterWallStepDuringTheRequest: a long-poll is sent at +0;
// at +1 s the wall clock steps forward 5 s; the sidecar renews at +10 s
// (validUntil is that renewal's start on the stepped wall clock + a renew
// deadline of 10 s: 25 s after the send as the wall clock read then) and
// answers at once, 10 s of claim left. The supervisor, throttled, reads
// the answer 200 ms later. The wall-clock arithmetic gives +25 s, the
// window's upper end (arrival + validForMs) +20.2 s: killing 100 ms before
// that is 100 ms after the claim ended at +20 s. The step shows as the
// wall clock's elapsed time exceeding the monotonic one over the request,
// and the supervisor then takes the send + validForMs (+10 s), the safe
// end of the window.
func TestDeadlineAfterWallStepDuringTheRequest(t *testing.T) {
	const step = 5 * time.Second
	wall0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	sent := Mono(100 * time.Second)
	written := sent + Mono(10*time.Second)
	claimEnd := written + Mono(10*time.Second)
	received := written + Mono(200*time.Millisecond)
	l := validFor(leading(4, 9, wall0.Add(step+20*time.Second)), 10000)
	o := Observation{SentWall: wall0, SentMono: sent, RecvWall: wall0.Add(step + time.Duration(received-sent)), RecvMono: received, Leader: l}
	d := Deadline(o)
	if kill := d - Mono(killAhead); kill > claimEnd {
		t.Errorf("after a wall-clock step during the request the child is killed at +%v, after its claim ended at +%v", time.Duration(kill-sent), time.Duration(claimEnd-sent))
	}
	if want := sent + Mono(10*time.Second); d != want {
		t.Errorf("deadline +%v, want the send + validForMs, +%v", time.Duration(d-sent), time.Duration(want-sent))
	}

	// Without a step (a drift within the tolerance), the wall clock's
	// exact moment is kept.
	o.RecvWall = wall0.Add(time.Duration(received-sent) + wallStepTolerance/2)
	o.Leader = validFor(leading(4, 9, wall0.Add(20*time.Second)), 10000)
	if d, want := Deadline(o), sent+Mono(20*time.Second); d != want {
		t.Errorf("without a step: deadline +%v, want +%v", time.Duration(d-sent), time.Duration(want-sent))
	}
}

// countingClock's monotonic clock moves only when the test says; it counts
// its readings.
type countingClock struct {
	mu    sync.Mutex
	mono  Mono
	reads int
}

func (c *countingClock) Wall() time.Time { return time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC) }

func (c *countingClock) Mono() Mono {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.mono
}

func (c *countingClock) state() (Mono, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mono, c.reads
}

// TestObserveTakesTheArrivalAtTheFirstByte: the answer's arrival, the
// upper end of the claim's window, is taken when the answer's first byte
// arrives, not after its body is read and decoded (a slow read would make
// the window's end later than the claim's). The sidecar here sends its
// headers, waits until the supervisor has read its clock for the arrival,
// moves the clock an hour on, and only then sends the body.
func TestObserveTakesTheArrivalAtTheFirstByte(t *testing.T) {
	clock := &countingClock{mono: Mono(time.Second)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		// Not poll: t.Fatal belongs to the test's goroutine.
		if err := wait.PollUntilContextTimeout(r.Context(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			_, reads := clock.state()
			return reads >= 2, nil // the send, the arrival
		}); err != nil {
			t.Errorf("the supervisor did not read its clock when the answer's first byte came: %v", err)
		}
		clock.mu.Lock()
		clock.mono += Mono(time.Hour)
		clock.mu.Unlock()
		_ = json.NewEncoder(w).Encode(api.Leader{IsLeader: true, FencingToken: 1, Revision: 1})
	}))
	t.Cleanup(srv.Close)
	c := api.NewClient(srv.URL, &http.Client{Timeout: 10 * time.Second})
	s := &supervisor{cfg: Config{Clock: clock, API: c}}
	o := s.observe(context.Background(), s.ask)
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if o.RecvMono != Mono(time.Second) {
		t.Errorf("arrival taken at %v, want at the first byte, %v, before the body came", time.Duration(o.RecvMono), time.Second)
	}
}
