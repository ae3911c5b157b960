package election

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// SuccessorAnnotation names, on a Lease its leader has just released, the
// candidate that leader chose to take over (see Config.Successor). The
// successor takes the Lease at once; every other candidate waits one
// retry period and takes it only if the successor has not. The annotation
// is advice, never a claim: every write stays conditional on the version
// read, a candidate named but gone (or a stranger named by hand) delays
// the next holder by one retry period at most, and the successor's own
// write removes it.
const SuccessorAnnotation = "leader-elector.io/successor"

// SuccessorPicker names the candidate a releasing leader hands over to,
// given the fencing token of the term it releases (for a tie-break that
// changes from term to term); "" names none, and the release is a plain
// race as before.
type SuccessorPicker func(token int64) string

// successorOf reads the successor named on lease ("" for none).
func successorOf(lease *coordinationv1.Lease) string {
	if lease == nil {
		return ""
	}
	return lease.Annotations[SuccessorAnnotation]
}

// dropSuccessor returns lease without the successor annotation when this
// candidate writes itself into it as holder: once someone holds the Lease
// the advice is spent, and a stale name must not delay the next release's
// followers. Any other write (a release naming a successor) is left alone.
func dropSuccessor(lease *coordinationv1.Lease, identity string) *coordinationv1.Lease {
	if ptr.Deref(lease.Spec.HolderIdentity, "") != identity {
		return lease
	}
	if _, ok := lease.Annotations[SuccessorAnnotation]; !ok {
		return lease
	}
	lease = lease.DeepCopy()
	delete(lease.Annotations, SuccessorAnnotation)
	return lease
}

// nameSuccessor sets (or, for "", removes) the successor annotation on
// lease, which the caller owns and is about to write.
func nameSuccessor(lease *coordinationv1.Lease, successor string) {
	if successor == "" {
		delete(lease.Annotations, SuccessorAnnotation)
		return
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[SuccessorAnnotation] = successor
}

// observeSuccessor records the successor named on the Lease version the
// cache has just taken in (before the version reaches observeRead).
func (t *tracker) observeSuccessor(lease *coordinationv1.Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.successor = successorOf(lease)
}

// deferringLocked reports whether this candidate leaves the Lease to a
// successor named by its releasing leader: the Lease as last observed is
// released (no holder, with a history), names another candidate, and one
// retry period has not passed since this candidate saw it so.
func (t *tracker) deferringLocked(now time.Time) bool {
	return t.haveObserved && t.observed.holder == "" && !t.observed.historyless() &&
		t.successor != "" && t.successor != t.identity && now.Sub(t.observedAt) < t.successorWait
}

// deferring is deferringLocked now.
func (t *tracker) deferring() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.deferringLocked(t.clock.Now())
}

// namedSuccessor reports whether the Lease, as last observed, is released
// to this candidate: it takes it at once, without the back-off of races
// it lost before (it is no race).
func (t *tracker) namedSuccessor() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.haveObserved && t.observed.holder == "" && t.successor == t.identity
}

// withSuccessor fills in s.Successor for a leader: whom a release would
// name now.
func (e *Elector) withSuccessor(s leadership.State) leadership.State {
	if s.IsLeader {
		s.Successor = e.pickSuccessor(s.FencingToken)
	}
	return s
}

// pickSuccessor asks Config.Successor, if any, whom to hand the term of
// token over to; never this candidate itself.
func (e *Elector) pickSuccessor(token int64) string {
	if e.cfg.Successor == nil {
		return ""
	}
	if s := e.cfg.Successor(token); s != e.cfg.Identity {
		return s
	}
	return ""
}
