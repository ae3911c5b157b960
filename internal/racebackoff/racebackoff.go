// Package racebackoff spaces out an elector's takeover attempts after the
// races for a Lease it lost, so that a large group of candidates is not a
// thundering herd at every change of leader (package election).
package racebackoff

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Backoff decides how long a candidate waits, once the Lease may be
// taken (released, or its holder's lease ran out), before it tries.
//
// Every follower learns of a release from its watch at the same moment, and
// every follower reaches a crashed holder's expiry at the same moment: if all
// try at once, the API server answers one takeover and N-1 conflicts, which
// at 200 candidates on 2 cores costs most of a second before the winner is
// known (docs/performance.md, "Scale"). A candidate does not know how many
// others there are, but it learns that there are some each time it loses a
// race: it was ready to take the Lease and someone else took it (its write
// was refused, or the watch showed the new holder just before it wrote; one
// still waiting out its delay when the winner appears has lost nothing).
// So a
// loser waits a random delay before its next takeover attempt, in a window
// that doubles with each race lost in a row ("full jitter" exponential
// back-off): in a large group most losers soon wait, and the few that try
// at once find the Lease free; in a small group a candidate that has not
// lost tries at once, as before. A fixed jitter for everyone was measured to
// slow small groups down, which is why there is no delay before a first
// loss.
//
// Winning resets the count, and so does a long time without a lost race:
// a group that shrank gets back to immediate attempts. What is learnt is
// kept between races, so the first race of a group that has just started
// (or been quiet for that long) is still a herd; the ones after it are not.
//
// It only moves WHEN a takeover is tried: every write stays conditional on
// the Lease's resourceVersion and no expiry check is skipped. The delay is
// at most Max(retryPeriod), half a retry period, so the bound on
// a crash takeover (lease duration + 2.2 retry periods, client-go's own
// retry) still holds even for a candidate that tries last — unless the API
// server refuses takeovers with 429 (see Throttled), when no bound of ours
// holds anyway.
//
// Hand-written: client-go's wait.Backoff steps a fixed sequence and has no
// notion of forgetting after a quiet time, and the delay must be drawn once
// per race (kept until the next loss), not per call.
type Backoff struct {
	clock clock.PassiveClock
	// base is the window after the first loss; max is the largest window;
	// forget is how long without a lost race resets the count.
	base, max, forget time.Duration
	// Random returns a number in [0, 1); tests make it deterministic.
	Random func() float64

	mu sync.Mutex
	// losses counts the races lost in a row; lastLoss is when the last
	// was.
	losses   int
	lastLoss time.Time
	// overloaded is set by a race lost to the API server's 429 (see
	// lostOverloaded), until a win or a long quiet time.
	overloaded bool
	// delay is the wait drawn at the last loss, for the next race.
	delay time.Duration
	// notBefore is when the API server, answering a takeover with a
	// Retry-After, allows the next one (see Throttled).
	notBefore time.Time
}

// raceBackoffBase is the window after a first lost race: about the time a
// conditional write and the watch event of its result take on a loaded API
// server, so that the next race's few contenders are usually spread wider
// than one write.
const raceBackoffBase = 25 * time.Millisecond

// raceBackoffForgetLeases is how many lease durations without a lost race
// reset the count: long enough to carry what a race taught across the
// handovers of a rollout and across consecutive crash takeovers (each at
// least a lease duration apart), short enough that a group that shrank is
// back to immediate attempts within minutes (5 at the default timings).
const raceBackoffForgetLeases = 20

// Max is the largest window: half a retry period.
func Max(retryPeriod time.Duration) time.Duration { return retryPeriod / 2 }

// Slot is how long each candidate in a deterministic order of takeover
// (Ranked) has to write before the next one tries: a tenth of the retry
// period, at least raceBackoffBase (the time a conditional write and the
// watch event of its result take). A slot is only waited out when every
// candidate before it is gone, so it is chosen wide: on a loaded API
// server 25 ms slots let the next two candidates write before they saw
// the first one's write (TestTakeoverWritesAudited, then named
// TestCrashTakeoverRanked: 2 refused writes in 1 of 3 runs beside a CI run).
func Slot(retryPeriod time.Duration) time.Duration {
	return max(raceBackoffBase, retryPeriod/10)
}

// Ranked is the wait, from the moment a Lease may be taken, of the
// candidate at place rank (0 first) in an order every candidate computes
// alike (election.Config.TakeoverRank): one Slot per candidate before it,
// at most Max, so that the bound on a crash takeover holds for the last
// too. Where the order is known it replaces the back-off after lost races:
// one candidate writes first, the next a slot later if the first is gone,
// and no race is left to learn from.
func Ranked(rank int, retryPeriod time.Duration) time.Duration {
	return min(time.Duration(max(rank, 0))*Slot(retryPeriod), Max(retryPeriod))
}

// New returns the back-off of a candidate with these timings; clk
// measures the quiet time after which lost races are forgotten.
func New(clk clock.PassiveClock, retryPeriod, leaseDuration time.Duration) *Backoff {
	maxWindow := Max(retryPeriod)
	return &Backoff{
		clock:  clk,
		base:   min(raceBackoffBase, maxWindow),
		max:    maxWindow,
		forget: raceBackoffForgetLeases * leaseDuration,
		Random: rand.Float64,
	}
}

// Lost records a race lost: the Lease was ready to be taken by this
// candidate and another took it. It draws the wait for the next race.
func (b *Backoff) Lost() { b.recordLoss(false) }

// recordLoss counts a race lost (overloaded: to a 429, see lostOverloaded)
// and draws the wait for the next race.
func (b *Backoff) recordLoss(overloaded bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock.Now()
	if b.forgottenLocked(now) {
		b.losses, b.overloaded = 0, false
	}
	b.losses++
	b.lastLoss = now
	b.overloaded = b.overloaded || overloaded
	b.delay = time.Duration(b.Random() * float64(b.windowLocked()))
}

// windowLocked is the window of the next race's delay: the base doubled for
// each race lost in a row after the first, at most max; max at once after
// a refusal for overload (see LostOverloaded).
func (b *Backoff) windowLocked() time.Duration {
	if b.overloaded {
		return b.max
	}
	window := b.base
	for i := 1; i < b.losses && window < b.max; i++ {
		window *= 2
	}
	return min(window, b.max)
}

// LostOverloaded records a race lost because the API server refused this
// candidate's takeover with 429 Too Many Requests: the race's writers were
// enough to overload it, so the group is large, and the next race is drawn
// from the largest window at once instead of doubling towards it. Doubling
// from 25 ms took six to seven handovers at 200 candidates, every one of
// them a herd of about 200 writes (docs/performance.md), because a herd
// makes the winner's write slow to show, and everyone's delay runs out
// before it does. Only a 429 says so: a conflict (409) is what a group of
// two also sees.
func (b *Backoff) LostOverloaded() { b.recordLoss(true) }

// Won records that this candidate holds the Lease: its next race, if any,
// is tried at once.
func (b *Backoff) Won() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.losses, b.overloaded = 0, false
	b.delay = 0
}

// Throttled records that the API server refused a takeover write and asked
// for retryAfter before the next (429 Too Many Requests from priority and
// fairness, or a 5xx with Retry-After): no takeover is tried before then,
// and not before this candidate's drawn delay on top of it, so that the
// candidates refused together do not come back together. retryAfter is
// capped at the largest window, which keeps a refused candidate's next try
// within a retry period of the refusal whatever the server asks.
//
// client-go's REST client would wait out the Retry-After itself and send
// the same write again; the takeover writes are sent once instead (see
// leasecache.Cache.updateOnce), because by then the Lease has usually been taken
// and the write can only be refused again.
func (b *Backoff) Throttled(retryAfter time.Duration) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delay := b.delay
	if b.forgottenLocked(b.clock.Now()) {
		delay = 0
	}
	b.notBefore = b.clock.Now().Add(min(retryAfter, b.max) + delay)
}

// ThrottledUntil is when the API server allows this candidate's next
// takeover (zero if it has not refused one).
func (b *Backoff) ThrottledUntil() time.Time {
	if b == nil {
		return time.Time{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.notBefore
}

// Wait is how long after the Lease may be taken this candidate tries it.
func (b *Backoff) Wait() time.Duration {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.forgottenLocked(b.clock.Now()) {
		return 0
	}
	return b.delay
}

// LostInARow is the number of races lost in a row (for tests and logs).
func (b *Backoff) LostInARow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.forgottenLocked(b.clock.Now()) {
		return 0
	}
	return b.losses
}

func (b *Backoff) forgottenLocked(now time.Time) bool {
	return b.losses > 0 && now.Sub(b.lastLoss) >= b.forget
}
