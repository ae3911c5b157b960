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

// stamped returns lease with the metadata the API server would stamp on it:
// its creation time, and the time of its last update.
func stamped(lease *coordinationv1.Lease, created, updated time.Time) *coordinationv1.Lease {
	lease.CreationTimestamp = metav1.NewTime(created.Truncate(time.Second))
	lease.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "leader-election", Operation: metav1.ManagedFieldsOperationUpdate, Time: ptr.To(metav1.NewTime(updated.Truncate(time.Second)))}}
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
	fresh := stamped(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName, ResourceVersion: "40"}}, recreated, recreated)
	if err := l.client.Tracker().Update(leasesGVR, fresh, testNamespace); err != nil {
		t.Fatal(err)
	}
	l.tracker.observeObject(fresh)
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
	// One above the server's clock at the re-creation: above anything an
	// earlier object carried.
	want := secondsSinceEpoch(recreated) + 1
	got := int64(ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, -1))
	if got != want {
		t.Errorf("new term's token = %d, want %d (one above the seconds since %v to the re-creation)", got, want, tokenEpoch)
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
	old := stamped(newLease("pod-b", 0, t0), oldCreated, oldCreated)
	tr.observeObject(old)
	// The old object's terms: each allowed only while at most the server's
	// clock; a group that starts them faster is held back.
	token := int64(0)
	for range 5000 {
		next, err := tr.newTermToken(token + 1)
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
	if bound := secondsSinceEpoch(clk.Now()); token > bound {
		t.Fatalf("old object's last token %d is ahead of the server's clock %d", token, bound)
	}

	// All stopped; deleted and re-created in the same second as the last term.
	fresh, freshClk := newTestTracker(t)
	freshClk.SetTime(clk.Now())
	recreated := clk.Now()
	fresh.observeObject(stamped(&coordinationv1.Lease{}, recreated, recreated))
	fresh.observeRead(record{})
	freshClk.Step(testLeaseDuration)
	first, err := fresh.newTermToken(1)
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
	created := t0
	tr.observeObject(stamped(newLease("", 0, t0), created, created))
	floor := secondsSinceEpoch(created)
	if _, err := tr.newTermToken(1); !errors.Is(err, errTokenAhead) {
		t.Fatalf("token %d in the second the Lease was created: error %v, want %v", floor+1, err, errTokenAhead)
	}
	clk.Step(time.Second)
	got, err := tr.newTermToken(1)
	if err != nil || got != floor+1 {
		t.Fatalf("newTermToken(1) a second later = %d, %v; want %d, nil", got, err, floor+1)
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
// candidate's own is created as `spec: {}` and taken a lease duration after
// it was found missing, with a token above the seconds to its creation.
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
	created := t0.Add(-time.Hour)
	// The old terms of this object reached the server's clock at t0.
	lastOld := secondsSinceEpoch(t0)
	clk.Step(2 * time.Second)
	replaced := clk.Now()
	tr.observeObject(stamped(&coordinationv1.Lease{}, created, replaced))
	tr.observeRead(record{})
	clk.Step(testLeaseDuration)
	got, err := tr.newTermToken(1)
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
	l.tracker.observeObject(stamped(newLease("", 0, t0), t0.Add(-time.Hour), t0))
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
