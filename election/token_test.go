package election

import (
	"errors"
	"math"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// created returns lease with the creationTimestamp the API server would
// stamp on it.
func created(lease *coordinationv1.Lease, at time.Time) *coordinationv1.Lease {
	lease.CreationTimestamp = metav1.NewTime(at.Truncate(time.Second))
	return lease
}

// secondsSinceEpoch is the token clock's reading at t.
func secondsSinceEpoch(t time.Time) int64 { return int64(t.Sub(tokenEpoch) / time.Second) }

// TestTokenAcrossRecreationWhileRunning: the pod leads with token 8; the
// Lease is deleted and applied again as `spec: {}` (kubectl delete/apply,
// helm uninstall/install, a GitOps prune). The token the app sees never goes
// back, nobody takes the new Lease before a lease duration, and the next
// term's token is above 8 and above the seconds to the new Lease's creation.
func TestTokenAcrossRecreationWhileRunning(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("pod-b", 7, t0))
	l.ownLease = false
	getOrFail(t, ctx, l)
	l.clock.Step(testLeaseDuration)
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(8, l.clock.Now())); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if s := l.tracker.Snapshot(); !s.IsLeader || s.FencingToken != 8 {
		t.Fatalf("isLeader, token = %v, %d; want true, 8", s.IsLeader, s.FencingToken)
	}

	// Deleted, then applied again by hand: a new object, spec: {}.
	l.tracker.observeDeleted()
	recreated := l.clock.Now().Add(time.Second)
	l.clock.Step(time.Second)
	fresh := created(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName, ResourceVersion: "40"}}, recreated)
	if err := l.client.Tracker().Update(leasesGVR, fresh, testNamespace); err != nil {
		t.Fatal(err)
	}
	l.tracker.observeObject(fresh)
	// The answer that brings the new object says when it was sent.
	l.tracker.server.ObserveDate(recreated)
	rec, _, err := l.Get(ctx)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if rec.HolderIdentity != unknownHolder {
		t.Errorf("client-go is shown holder %q for a replaced Lease, want %q", rec.HolderIdentity, unknownHolder)
	}
	if s := l.tracker.Snapshot(); s.IsLeader || s.FencingToken != 8 || s.Holder != "" {
		t.Errorf("after the re-creation: isLeader, holder, token = %v, %q, %d; want false, \"\", 8 (the token never goes back)", s.IsLeader, s.Holder, s.FencingToken)
	}
	if err := l.Update(ctx, ownRecord(1, l.clock.Now())); !errors.Is(err, errNotExpired) {
		t.Errorf("acquisition of the replaced Lease at once: error %v, want %v", err, errNotExpired)
	}

	l.clock.Step(testLeaseDuration)
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(1, l.clock.Now())); err != nil {
		t.Fatalf("acquisition a lease duration later: %v", err)
	}
	// One above the server's clock when the replaced Lease is taken, a
	// lease duration after the re-creation (counted 1% slow): above
	// anything an earlier object carried, even tokens that ran a lease
	// duration ahead of the clock.
	want := secondsSinceEpoch(recreated) + int64(testLeaseDuration.Seconds()*0.99) + 1
	got := int64(ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, -1))
	if got != want {
		t.Errorf("new term's token = %d, want %d (one above the server's clock, in seconds since %v, when it was taken)", got, want, tokenEpoch)
	}
	if s := l.tracker.Snapshot(); !s.IsLeader || s.FencingToken != want {
		t.Errorf("isLeader, token = %v, %d; want true, %d", s.IsLeader, s.FencingToken, want)
	}
}

// TestTokenAcrossRecreationWhileStopped: a process that never saw the old
// Lease (all sidecars were stopped while it was re-created) still starts
// above every token the old one could carry: those were at most the
// server's clock when they were written, and so below the new Lease's
// creation.
func TestTokenAcrossRecreationWhileStopped(t *testing.T) {
	tr, clk := newTestTracker(t)
	oldCreated := t0.Add(-time.Hour)
	tr.observeObject(created(newLease("pod-b", 0, t0), oldCreated))
	tr.server.ObserveDate(oldCreated)
	// The old object's terms: each allowed only while at most the server's
	// clock; a group that starts them faster is held back.
	token := int64(0)
	for range 5000 {
		next, err := tr.newTermToken(token+1, true)
		if errors.Is(err, errTokenAhead) {
			clk.Step(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		tr.observeWrite(clk.Now(), record{holder: testIdentity, transitions: next, durationSeconds: 15, renewTime: clk.Now()})
		token = next
	}
	if bound := secondsSinceEpoch(clk.Now()); token > bound+tr.tokenBurstLocked() {
		t.Fatalf("old object's last token %d is further ahead of the server's clock %d than the burst", token, bound)
	}

	// All stopped; deleted and re-created in the same second as the last term.
	fresh, freshClk := newTestTracker(t)
	freshClk.SetTime(clk.Now())
	recreated := clk.Now()
	fresh.observeObject(created(&coordinationv1.Lease{}, recreated))
	fresh.server.ObserveDate(recreated)
	fresh.observeRead(record{})
	freshClk.Step(testLeaseDuration)
	first, err := fresh.newTermToken(1, true)
	if err != nil {
		t.Fatal(err)
	}
	if first <= token {
		t.Errorf("first token on the re-created Lease = %d, not above %d, the last one on the old Lease", first, token)
	}
}

// TestTokenRateIsBoundedByServerClock: terms cannot start faster than the
// token clock; a burst waits, it is not refused for good.
func TestTokenRateIsBoundedByServerClock(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.server.ObserveDate(t0)
	clock := secondsSinceEpoch(t0)
	burst := tr.tokenBurstLocked()
	if _, err := tr.newTermToken(clock+burst+1, true); !errors.Is(err, errTokenAhead) {
		t.Fatalf("token %d, %d ahead of the server's clock: error %v, want %v", clock+burst+1, burst+1, err, errTokenAhead)
	}
	// A second and the drift allowance later.
	clk.Step(1100 * time.Millisecond)
	got, err := tr.newTermToken(clock+burst+1, true)
	if err != nil || got != clock+burst+1 {
		t.Fatalf("a second later: newTermToken = %d, %v; want %d, nil", got, err, clock+burst+1)
	}
}

// TestTokenOverflowIsRefused: a Lease at the int32 limit (edited by hand)
// is refused with a clear error, never written with a token that wraps.
func TestTokenOverflowIsRefused(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", math.MaxInt32, t0))
	var logged []error
	l.logExhausted = func(err error) { logged = append(logged, err) }
	getOrFail(t, ctx, l)
	for range 2 {
		err := l.Update(ctx, ownRecord(math.MaxInt32+1, l.clock.Now()))
		if !errors.Is(err, errTokenExhausted) {
			t.Fatalf("acquisition at the int32 limit: error %v, want %v", err, errTokenExhausted)
		}
	}
	if len(logged) != 1 {
		t.Errorf("logged %d times, want once", len(logged))
	}
	if got := ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, 0); got != math.MaxInt32 {
		t.Errorf("Lease transitions = %d after refused writes, want unchanged", got)
	}
}

// TestLockCreatesMissingLeaseWithoutHolder: a missing Lease that is not this
// candidate's own is created as `spec: {}`, shown to client-go as held by an
// unknown holder, and taken a lease duration after it was found missing (its
// token floors are TestTokenAcrossRecreation*'s).
func TestLockCreatesMissingLeaseWithoutHolder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "create", "update"})
	l.ownLease = false
	if _, _, err := l.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get error = %v, want NotFound", err)
	}
	if err := l.Create(ctx, ownRecord(0, l.clock.Now())); !errors.Is(err, errCreatedWithoutHolder) {
		t.Fatalf("Create error = %v, want %v", err, errCreatedWithoutHolder)
	}
	created := getLease(t, l.client)
	if created.Spec.HolderIdentity != nil || created.Spec.RenewTime != nil {
		t.Errorf("created Lease spec = %+v, want empty", created.Spec)
	}
	rec, _, err := l.Get(ctx)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if rec.HolderIdentity != unknownHolder {
		t.Errorf("client-go is shown holder %q, want %q", rec.HolderIdentity, unknownHolder)
	}
	l.clock.Step(testLeaseDuration)
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(1, l.clock.Now())); err != nil {
		t.Fatalf("acquisition a lease duration later: %v", err)
	}
	if s := l.tracker.Snapshot(); !s.IsLeader {
		t.Errorf("not leader after the acquisition: %+v", s)
	}
}

// TestTokenAcrossReplaceWhileStopped: kubectl replace or helm upgrade
// --force keep the object (same creationTimestamp) but reset its token to 0.
// With no sidecar running through it, the next term still starts above
// every token the object carried, from the server's stamp of the replace.
func TestTokenAcrossReplaceWhileStopped(t *testing.T) {
	tr, clk := newTestTracker(t)
	createdAt := t0.Add(-time.Hour)
	// The old terms of this object reached the server's clock at t0.
	lastOld := secondsSinceEpoch(t0)
	clk.Step(2 * time.Second)
	replaced := clk.Now()
	tr.observeObject(created(&coordinationv1.Lease{}, createdAt))
	// The answer that brought the replaced record.
	tr.server.ObserveDate(replaced)
	tr.observeRead(record{})
	clk.Step(testLeaseDuration)
	got, err := tr.newTermToken(1, true)
	if err != nil {
		t.Fatal(err)
	}
	if got <= lastOld {
		t.Errorf("first token after the replace = %d, not above %d, the old object's last", got, lastOld)
	}
}

// TestRenewalKeepsTheTermsToken: client-go renews with the token it
// proposed for the term, not the one written (newTermToken's); a renewal
// must keep the term's token, not start a new term each time.
func TestRenewalKeepsTheTermsToken(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", 0, t0))
	l.ownLease = false
	l.tracker.observeObject(created(newLease("", 0, t0), t0.Add(-time.Hour)))
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(1, l.clock.Now())); err != nil {
		t.Fatalf("acquire: %v", err)
	}
	term := l.tracker.Snapshot().FencingToken
	if term <= 1 {
		t.Fatalf("term's token %d, want above the Lease's creation floor", term)
	}
	for range 3 {
		l.clock.Step(2 * time.Second)
		// client-go's fast path renews with what it proposed: 1.
		if err := l.Update(ctx, ownRecord(1, l.clock.Now())); err != nil {
			t.Fatalf("renew: %v", err)
		}
		if got := int64(ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, -1)); got != term {
			t.Fatalf("renewal wrote token %d, want the term's %d", got, term)
		}
	}
}

// TestRestoredOwnTermIsNotContinued: after an etcd restore brings back an
// old term of this pod (P led with 7, Q then took 8), P must not continue
// its old term with token 7: the Lease would go back below Q's token.
func TestRestoredOwnTermIsNotContinued(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeWrite(clk.Now(), own(7, clk.Now()))
	tr.observeRead(other("pod-b", 8, clk.Now()))
	// The restore: the Lease names P's old term again.
	tr.observeRead(own(7, clk.Now()))
	if _, ok := tr.currentOwnTerm(); ok {
		t.Error("currentOwnTerm() continues token 7 after token 8 was seen")
	}
	if tr.mayAcquire() {
		t.Error("mayAcquire() = true at once for a restored old term of this pod; it must wait for it to expire like any holder's")
	}
	clk.Step(testLeaseDuration)
	if token, err := tr.newTermToken(8, true); err != nil || token != 9 {
		t.Errorf("newTermToken = %d, %v; want 9", token, err)
	}
}

// TestTokenFarAheadOfTheClockDoesNotStall: a token edited by hand far ahead
// of the server's clock cannot be waited for; the term starts, with a
// warning, instead of never.
func TestTokenFarAheadOfTheClockDoesNotStall(t *testing.T) {
	tr, _ := newTestTracker(t)
	var warned []int64
	tr.setWarnAhead(func(token, _ int64) { warned = append(warned, token) })
	tr.server.ObserveDate(t0)
	ahead := secondsSinceEpoch(t0) + 1_000_000
	tr.observeRead(other("pod-b", ahead, t0))
	for range 2 {
		if token, err := tr.newTermToken(ahead+1, true); err != nil || token != ahead+1 {
			t.Fatalf("newTermToken = %d, %v; want %d", token, err, ahead+1)
		}
	}
	if len(warned) != 1 {
		t.Errorf("warned %d times, want once", len(warned))
	}
}

// TestMissingLeaseWaitRunsFromWhenFoundMissing: creating the missing Lease
// empty does not restart the wait for an unknown holder.
func TestMissingLeaseWaitRunsFromWhenFoundMissing(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeRead(other("pod-b", 5, clk.Now()))
	tr.observeDeleted()
	missing := clk.Now()
	clk.Step(time.Second)
	tr.observeRead(record{}) // the empty Lease this pod created
	if at, ok := tr.nextAttempt(); !ok || !at.Equal(missing.Add(testLeaseDuration)) {
		t.Errorf("nextAttempt() = %v, %v; want %v (a lease duration after it was found missing)", at, ok, missing.Add(testLeaseDuration))
	}
}
