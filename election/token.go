package election

import (
	"errors"
	"fmt"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leader-elector/leader-elector/serverclock"
)

// tokenEpoch is the origin of the token clock, the server clock's
// (serverclock.Epoch): a term that starts on a Lease object created t
// seconds after it gets a fencing token above t (see newTermToken).
var tokenEpoch = serverclock.Epoch

// errTokenExhausted is returned instead of starting a term whose token would
// not fit in spec.leaseTransitions (an int32): the API server would refuse
// the write, or the token would wrap and go back.
var errTokenExhausted = errors.New("the fencing token has reached the int32 limit of spec.leaseTransitions")

// errTokenAhead is returned instead of starting a term whose token would run
// ahead of the API server's clock (see newTermToken); it is a short wait,
// not a failure: the term starts as soon as the clock has caught up.
var errTokenAhead = errors.New("the next fencing token would run ahead of the API server's clock; waiting for it")

// observeObject records the Lease object's creationTimestamp, which the API
// server sets: the creation floor of the token (see newTermToken).
func (t *tracker) observeObject(lease *coordinationv1.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created = lease.CreationTimestamp.Time
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
//     reset its token), one more than the server's clock when this process
//     first saw it so, and when it takes it (a lease duration later, with
//     the clock read afresh): the server answered with that record after
//     every earlier token was written.
//
// The rule that makes the last two points hold: a token is never written
// more than tokenBurstLocked (a lease duration) above the API server's clock
// as this process knows it (serverclock.Clock); a Lease without history is taken
// at least a lease duration after its history was lost. A group that starts
// more terms than one a second, beyond that burst, over the life of its
// Lease object, waits here for the clock to catch up (errTokenAhead), one
// second at most per term. A token more than tokenAheadSlack ahead of the clock
// cannot have been written under the rule (a hand edit, a server clock set
// back): waiting for the clock would stall the group, so the term starts,
// and warnAhead is told once. Without any server time known (a fake
// clientset), the rule is not applied.
//
// strict false skips the floors and the rule that only matter for a Lease
// whose tokens fence something: a partition membership Lease (ownLease).
func (t *tracker) newTermToken(proposed int64, strict bool) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	token := max(proposed, t.highest+1)
	if strict && !t.created.IsZero() {
		token = max(token, int64(t.created.Sub(tokenEpoch)/time.Second)+1)
	}
	bound, known := t.server.Bound()
	if strict && t.observed.historyless() {
		token = max(token, t.historylessFloor+1)
		if known {
			token = max(token, bound+1)
		}
	}
	if token > math.MaxInt32 {
		return 0, fmt.Errorf("%w: the next term would need token %d; stop every sidecar of the group, then delete the Lease to start over (the new Lease's tokens start above the seconds since %s, below the hand-edited ones: see docs/safety.md)", errTokenExhausted, token, tokenEpoch.Format(time.DateOnly))
	}
	if ahead := token - bound; strict && known && ahead > t.tokenBurstLocked() {
		if ahead <= tokenAheadSlack {
			return 0, fmt.Errorf("%w: token %d, server clock %d", errTokenAhead, token, bound)
		}
		if t.warnAhead != nil {
			t.warnAhead(token, bound)
			t.warnAhead = nil
		}
	}
	return token, nil
}

// tokenBurstLocked is how far, in seconds, a token may run ahead of the
// server's clock: a lease duration less the drift allowance, at least one.
// A Lease without history is taken a lease duration after it was first seen
// so, with a token above the server's clock at that moment (read afresh,
// see observingLock.Update): above every token written before, even those
// that ran this far ahead.
func (t *tracker) tokenBurstLocked() int64 {
	return max(1, int64(math.Floor(t.leaseDuration.Seconds()*(1-serverclock.DriftAllowance))))
}

// tokenAheadSlack is how far, in seconds, a token may be ahead of this
// process's view of the server's clock and still be one that sidecars wrote
// under the rule (their views of the clock differ by a few seconds).
const tokenAheadSlack = 120

// currentOwnTerm returns the token of this process's own term if the Lease,
// as last observed, still shows it and no higher token has been seen since
// (an etcd restore can bring back an old term of this process after another
// pod's newer one): a renewal while this process holds the Lease then
// continues that term. Taking the Lease back (not holding) starts a new
// term even when ok: a claim that ended is never resumed (observeWrite).
func (t *tracker) currentOwnTerm() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownToken, t.ownTermCurrentLocked()
}

func (t *tracker) ownTermCurrentLocked() bool {
	return t.hasOwnTerm && t.observed.holder == t.identity && t.observed.transitions == t.ownToken && t.ownToken >= t.highest
}

// setWarnAhead sets the one-time warning of newTermToken.
func (t *tracker) setWarnAhead(warn func(token, clock int64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.warnAhead = warn
}
