package election

import (
	"errors"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
)

// tokenEpoch is the origin of the token clock: a term that starts on a Lease
// object created t seconds after it gets a fencing token above t (see
// newTermToken). 2026-01-01T00:00:00Z keeps tokens far below the int32
// limit of spec.leaseTransitions until 2094.
var tokenEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// errTokenExhausted is returned instead of starting a term whose token would
// not fit in spec.leaseTransitions (an int32): the API server would refuse
// the write, or the token would wrap and go back.
var errTokenExhausted = errors.New("the fencing token has reached the int32 limit of spec.leaseTransitions")

// errTokenAhead is returned instead of starting a term whose token would run
// ahead of the API server's clock (see newTermToken); it is a short wait,
// not a failure: the term starts as soon as the clock has caught up.
var errTokenAhead = errors.New("the next fencing token would run ahead of the API server's clock; waiting for it")

// serverClock is a lower bound on the API server's wall clock, in whole
// seconds since tokenEpoch: the largest time the server has stamped on a
// Lease this process has seen (creationTimestamp, managedFields times), plus
// the time elapsed since, on this process's monotonic clock.
type serverClock struct {
	seconds int64
	at      time.Time
	known   bool
}

// bound returns the lower bound at now.
func (c serverClock) bound(now time.Time) int64 {
	return c.seconds + int64(now.Sub(c.at)/time.Second)
}

// observeObject records what the Lease object's metadata says of the API
// server's clock and of the object's identity. Only times the API server
// stamped count: holders' renewTimes come from their own clocks.
func (t *tracker) observeObject(lease *coordinationv1.Lease) {
	stamped := lease.CreationTimestamp.Time
	for _, f := range lease.ManagedFields {
		if f.Time != nil && f.Time.After(stamped) {
			stamped = f.Time.Time
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created = lease.CreationTimestamp.Time
	if stamped.IsZero() {
		return
	}
	now := t.clock.Now()
	// Stamps are truncated to the second, so the server's clock was at
	// least this when it wrote them.
	seconds := int64(stamped.Sub(tokenEpoch) / time.Second)
	if stamped.Before(tokenEpoch) {
		seconds = int64(math.Floor(stamped.Sub(tokenEpoch).Seconds()))
	}
	if !t.server.known || seconds > t.server.bound(now) {
		t.server = serverClock{seconds: seconds, at: now, known: true}
	}
}

// newTermToken returns the fencing token of a new term this process is
// about to write, given the token client-go proposes (the Lease's token plus
// one). The token is the largest of:
//   - what client-go proposes;
//   - one more than any token this process has seen or written, which keeps
//     it growing across a deletion, replacement or restore of the Lease
//     while this process runs;
//   - one more than the seconds from tokenEpoch to the creation of the Lease
//     object, which keeps it growing across a re-creation while no sidecar
//     runs: every token ever written on an earlier object of that name was
//     at most the server's clock (in seconds since tokenEpoch) when it was
//     written (the rule below), and that object was deleted before this one
//     was created;
//   - for a Lease without a holder's history (replaced as `spec: {}` by
//     kubectl replace or helm upgrade --force, which keep the object but
//     reset its token), the server's clock now: the replacement was stamped
//     by the server (managedFields) after every earlier token was written,
//     and at least a lease duration has passed since (the unknown-holder
//     wait), so the clock is past every one of them.
//
// The rule that makes the last point hold: a token is never written above
// the API server's clock as this process knows it (serverClock). A group
// that starts more terms than one a second, over the life of its Lease
// object, waits here for the clock to catch up (errTokenAhead), one second
// at most per term. Without any server time known (a fake clientset), the
// rule is not applied.
func (t *tracker) newTermToken(proposed int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	token := max(proposed, t.highest+1)
	if !t.created.IsZero() {
		token = max(token, int64(t.created.Sub(tokenEpoch)/time.Second)+1)
	}
	now := t.clock.Now()
	if t.server.known && t.observed.historyless() {
		token = max(token, t.server.bound(now))
	}
	if token > math.MaxInt32 {
		return 0, fmt.Errorf("%w: the next term would need token %d; delete the Lease to start over (a new Lease object starts above the seconds since %s, and the tokens published by the old one cannot be exceeded: see docs/safety.md)", errTokenExhausted, token, tokenEpoch.Format(time.DateOnly))
	}
	if t.server.known {
		if bound := t.server.bound(now); token > bound {
			return 0, fmt.Errorf("%w: token %d, server clock %d", errTokenAhead, token, bound)
		}
	}
	return token, nil
}

// continuesOwnTerm reports whether token is the one of this process's own
// current term, as the Lease still shows it: a write with it continues that
// term rather than starting a new one.
func (t *tracker) continuesOwnTerm(token int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.hasOwnTerm && token == t.ownToken && t.observed.holder == t.identity && t.observed.transitions == t.ownToken
}
