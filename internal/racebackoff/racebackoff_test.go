package racebackoff

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// half is the back-off's random draw in these tests: the middle of the
// window.
func half() float64 { return 0.5 }

func newTestClock() *clocktesting.FakeClock { return clocktesting.NewFakeClock(t0) }

// TestPolicy: no wait before a lost race; after k losses in a
// row a draw from a window of 25 ms × 2^(k-1), at most half a retry
// period; a win, or a long quiet time, starts over.
func TestPolicy(t *testing.T) {
	clk := newTestClock()
	b := New(clk, 2*time.Second, 15*time.Second)
	b.Random = half
	if w := b.Wait(); w != 0 {
		t.Fatalf("wait before any loss = %v, want 0 (a small group's followers try at once)", w)
	}
	for k, want := range []time.Duration{
		12500 * time.Microsecond, // window 25 ms
		25 * time.Millisecond,    // 50 ms
		50 * time.Millisecond,    // 100 ms
		100 * time.Millisecond,   // 200 ms
		200 * time.Millisecond,   // 400 ms
		400 * time.Millisecond,   // 800 ms
		500 * time.Millisecond,   // 1.6 s, capped at 1 s
		500 * time.Millisecond,
	} {
		b.Lost()
		if got := b.Wait(); got != want {
			t.Errorf("after %d losses: wait = %v, want %v", k+1, got, want)
		}
	}
	// Many more losses: the window stays at the cap (no overflow).
	b.Random = func() float64 { return 0.999999 }
	for range 200 {
		b.Lost()
	}
	if got, limit := b.Wait(), time.Second; got >= limit || got < 999*time.Millisecond {
		t.Errorf("after 208 losses: wait = %v, want just under %v", got, limit)
	}

	b.Won()
	if got := b.Wait(); got != 0 || b.LostInARow() != 0 {
		t.Errorf("after a win: wait = %v, losses = %d; want 0, 0", got, b.LostInARow())
	}

	// A long quiet time forgets the losses: 20 lease durations.
	b.Random = half
	b.Lost()
	b.Lost()
	clk.Step(300*time.Second - time.Nanosecond)
	if got := b.Wait(); got != 25*time.Millisecond {
		t.Errorf("just before the losses are forgotten: wait = %v, want 25ms", got)
	}
	clk.Step(time.Nanosecond)
	if got := b.Wait(); got != 0 || b.LostInARow() != 0 {
		t.Errorf("after 5 quiet minutes: wait = %v, losses = %d; want 0, 0", got, b.LostInARow())
	}
	b.Lost()
	if got := b.Wait(); got != 12500*time.Microsecond {
		t.Errorf("first loss after forgetting: wait = %v, want 12.5ms (the first window again)", got)
	}

	// Short timings: the first window is never above the cap.
	short := New(clk, 20*time.Millisecond, time.Second)
	short.Random = half
	short.Lost()
	if got := short.Wait(); got != 5*time.Millisecond {
		t.Errorf("retry period 20ms, one loss: wait = %v, want 5ms (half of the 10 ms cap)", got)
	}

	var none *Backoff
	none.Lost()
	none.Won()
	if none.Wait() != 0 {
		t.Error("a nil back-off waits")
	}
}

// TestThrottled: after a refusal with a Retry-After, no
// takeover before the Retry-After (at most half a retry period) plus the
// candidate's drawn delay; a 429 draws from the largest window until a win
// or a long quiet time.
func TestThrottled(t *testing.T) {
	clk := newTestClock()
	b := New(clk, 2*time.Second, 15*time.Second)
	b.Random = half
	if got := b.ThrottledUntil(); !got.IsZero() {
		t.Fatalf("throttled until %v before any refusal, want never", got)
	}
	b.Throttled(time.Second)
	if got, want := b.ThrottledUntil(), t0.Add(time.Second); !got.Equal(want) {
		t.Errorf("no race lost: throttled until %v, want %v (the Retry-After alone)", got, want)
	}
	b.Lost()
	b.Throttled(time.Second)
	if got, want := b.ThrottledUntil(), t0.Add(time.Second+12500*time.Microsecond); !got.Equal(want) {
		t.Errorf("one race lost: throttled until %v, want %v (Retry-After plus the drawn delay)", got, want)
	}
	b.Throttled(time.Hour)
	if got, want := b.ThrottledUntil(), t0.Add(time.Second+12500*time.Microsecond); !got.Equal(want) {
		t.Errorf("Retry-After of an hour: throttled until %v, want %v (capped at half a retry period)", got, want)
	}
	// A 429: the largest window at once (500 ms drawn from 1 s), and it
	// stays so for the races after, until a win.
	b.LostOverloaded()
	if w := b.Wait(); w != 500*time.Millisecond {
		t.Errorf("after a 429: wait %v, want 500ms (half of the largest window)", w)
	}
	b.Lost()
	if w := b.Wait(); w != 500*time.Millisecond {
		t.Errorf("a conflict after a 429: wait %v, want 500ms (still the largest window)", w)
	}
	b.Won()
	b.Lost()
	if w := b.Wait(); w != 12500*time.Microsecond {
		t.Errorf("a conflict after a win: wait %v, want 12.5ms (the first window again)", w)
	}
	clk.Step(20 * 15 * time.Second)
	b.LostOverloaded()
	clk.Step(20 * 15 * time.Second)
	b.Lost()
	if w := b.Wait(); w != 12500*time.Microsecond {
		t.Errorf("a conflict long after a 429: wait %v, want 12.5ms (forgotten)", w)
	}
	var none *Backoff
	none.LostOverloaded()
	none.Throttled(time.Second)
	if got := none.ThrottledUntil(); !got.IsZero() {
		t.Errorf("no back-off: throttled until %v, want never", got)
	}
}
