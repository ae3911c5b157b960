package election

import (
	"github.com/leader-elector/leader-elector/holderaddress"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// annotated returns lease with the holder-address annotation set to value.
func annotated(lease *coordinationv1.Lease, value string) *coordinationv1.Lease {
	lease.Annotations = map[string]string{holderaddress.Annotation: value}
	return lease
}

// observeVersion feeds the tracker one version of the Lease as the cache
// does: the object (onKeep), then its record (onChange).
func observeVersion(tr *tracker, lease *coordinationv1.Lease) {
	tr.observeHolderAddress(lease, false)
	tr.observeRead(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)))
}

func TestTrackerHolderAddress(t *testing.T) {
	tr, clk := newTestTracker(t)
	addrB := `{"holder":"pod-b","fencingToken":8,"address":"10.0.0.6:8080"}`

	observeVersion(tr, annotated(newLease("pod-b", 8, clk.Now()), addrB))
	s := tr.Snapshot()
	if s.Holder != "pod-b" || s.HolderAddress != "10.0.0.6:8080" {
		t.Fatalf("holder, address = %q, %q; want pod-b, 10.0.0.6:8080", s.Holder, s.HolderAddress)
	}
	rev := s.Revision

	// A renewal of the same term keeps it, and changes nothing.
	clk.Step(2 * time.Second)
	observeVersion(tr, annotated(newLease("pod-b", 8, clk.Now()), addrB))
	if s := tr.Snapshot(); s.HolderAddress != "10.0.0.6:8080" || s.Revision != rev {
		t.Errorf("after a renewal: address %q, revision %d; want 10.0.0.6:8080, %d", s.HolderAddress, s.Revision, rev)
	}

	// Taken over by a candidate that does not advertise: the old
	// annotation is still on the object, but not this term's.
	observeVersion(tr, annotated(newLease("pod-c", 9, clk.Now()), addrB))
	if s := tr.Snapshot(); s.Holder != "pod-c" || s.HolderAddress != "" {
		t.Errorf("after a takeover without an address: holder %q, address %q; want pod-c, none", s.Holder, s.HolderAddress)
	}
	// An annotation naming the holder with another token (forged, or left
	// by an earlier term of the same pod) is not this term's either.
	observeVersion(tr, annotated(newLease("pod-c", 9, clk.Now()), `{"holder":"pod-c","fencingToken":3,"address":"10.0.0.7:8080"}`))
	if s := tr.Snapshot(); s.HolderAddress != "" {
		t.Errorf("an annotation of token 3 shown for term 9: %q", s.HolderAddress)
	}

	// pod-b takes it back with a new term and its address; then the holder
	// stops renewing: once its lease has expired by this pod's observation
	// there is no holder and no address.
	addrB10 := `{"holder":"pod-b","fencingToken":10,"address":"10.0.0.6:8080"}`
	observeVersion(tr, annotated(newLease("pod-b", 10, clk.Now()), addrB10))
	if s := tr.Snapshot(); s.HolderAddress != "10.0.0.6:8080" {
		t.Fatalf("term 10: address %q", s.HolderAddress)
	}
	rev = tr.Snapshot().Revision
	clk.Step(testLeaseDuration)
	if s := tr.Snapshot(); s.Holder != "" || s.HolderAddress != "" || s.Revision == rev {
		t.Errorf("after expiry: holder %q, address %q, revision %d (was %d); want none, none, a new revision", s.Holder, s.HolderAddress, s.Revision, rev)
	}

	// A version of the same term without the annotation withdraws it.
	observeVersion(tr, annotated(newLease("pod-b", 10, clk.Now()), addrB10))
	observeVersion(tr, annotated(newLease("pod-b", 10, clk.Now().Add(time.Second)), "{"))
	if s := tr.Snapshot(); s.Holder != "pod-b" || s.HolderAddress != "" {
		t.Errorf("after a malformed annotation: holder %q, address %q; want pod-b, none", s.Holder, s.HolderAddress)
	}

	// Released: no holder, no address.
	observeVersion(tr, annotated(newLease("", 10, clk.Now()), addrB10))
	if s := tr.Snapshot(); s.Holder != "" || s.HolderAddress != "" {
		t.Errorf("after release: holder %q, address %q", s.Holder, s.HolderAddress)
	}
}

// TestElectorAdvertisesAddress runs two electors on one fake API server:
// the leader writes its address with its acquisition and every renewal,
// both show it, and after a release the new leader's address replaces it
// in the same versions that name the new term.
func TestElectorAdvertisesAddress(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	cfgA := fastConfig(client)
	cfgA.AdvertiseAddress = "10.0.0.5:8080"
	a, err := New(cfgA)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	runElector(t, ctx, a)
	waitFor(t, ctx, "pod-a leads", func() bool { return a.Snapshot().IsLeader })

	cfgB := fastConfig(client)
	cfgB.Identity = "pod-b"
	cfgB.AdvertiseAddress = "10.0.0.6:8080"
	b, err := New(cfgB)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	runElector(t, ctx, b)

	checkLease := func(holder, address string) {
		t.Helper()
		lease := getLease(t, client)
		a, ok := holderaddress.Parse(lease, false)
		if !ok || a.Holder != holder || a.Address != address || a.FencingToken != int64(ptr.Deref(lease.Spec.LeaseTransitions, -1)) || ptr.Deref(lease.Spec.HolderIdentity, "") != holder {
			t.Errorf("Lease: holder %q token %d, annotation %q; want %s's term with %s", ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, -1), lease.Annotations[holderaddress.Annotation], holder, address)
		}
	}
	checkLease(testIdentity, "10.0.0.5:8080")
	if s := a.Snapshot(); s.HolderAddress != "10.0.0.5:8080" {
		t.Errorf("leader's own view: address %q", s.HolderAddress)
	}
	waitFor(t, ctx, "the follower to show the leader's address", func() bool {
		s := b.Snapshot()
		return s.Holder == testIdentity && s.HolderAddress == "10.0.0.5:8080"
	})

	// Renewals carry it too.
	renewed := getLease(t, client).Spec.RenewTime.Time
	waitFor(t, ctx, "a renewal", func() bool {
		return getLease(t, client).Spec.RenewTime.After(renewed)
	})
	checkLease(testIdentity, "10.0.0.5:8080")

	if _, err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if s := a.Snapshot(); s.HolderAddress == "10.0.0.5:8080" {
		t.Errorf("released leader still shows its address: %+v", s)
	}
	waitFor(t, ctx, "pod-b to lead", func() bool { return b.Snapshot().IsLeader })
	checkLease("pod-b", "10.0.0.6:8080")
	for name, e := range map[string]*Elector{"pod-a": a, "pod-b": b} {
		waitFor(t, ctx, name+" to show pod-b's address", func() bool {
			s := e.Snapshot()
			return s.Holder == "pod-b" && s.HolderAddress == "10.0.0.6:8080"
		})
	}
}

// TestElectorReleaseRemovesAddress: the release write clears the
// annotation with the holder.
func TestElectorReleaseRemovesAddress(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	cfg := fastConfig(client)
	cfg.AdvertiseAddress = "10.0.0.5:8080"
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop := runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	if _, ok := holderaddress.Parse(getLease(t, client), false); !ok {
		t.Fatalf("no address on the Lease while leading: %v", getLease(t, client).Annotations)
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	lease := getLease(t, client)
	if v, ok := lease.Annotations[holderaddress.Annotation]; ok || ptr.Deref(lease.Spec.HolderIdentity, "x") != "" {
		t.Errorf("after release on shutdown: holder %q, annotation %q; want none", ptr.Deref(lease.Spec.HolderIdentity, "x"), v)
	}
	if s := e.Snapshot(); s.HolderAddress != "" {
		t.Errorf("address after release: %q", s.HolderAddress)
	}
}

// TestElectorWithoutAddressRemovesStaleAnnotation: a pod that does not
// advertise takes the Lease from one that did, and its acquisition removes
// the previous term's annotation.
func TestElectorWithoutAddressRemovesStaleAnnotation(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	lease := annotated(newLease("pod-b", 8, time.Now().Add(-time.Hour)), `{"holder":"pod-b","fencingToken":8,"address":"10.0.0.6:8080"}`)
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	client := newFakeClient(t, electorVerbs, lease)
	e, err := New(fastConfig(client))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	if v, ok := getLease(t, client).Annotations[holderaddress.Annotation]; ok {
		t.Errorf("annotation after a takeover without an address: %q", v)
	}
	if s := e.Snapshot(); s.HolderAddress != "" {
		t.Errorf("address: %q", s.HolderAddress)
	}
}
