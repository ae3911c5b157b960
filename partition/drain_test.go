package partition

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/ownership"
)

// TestMemberDrainsBeforeHandingOver: with a drain timeout, the partitions
// above the fair share are first shown as draining, together, with their
// deadline, and stay owned and renewed; a drain ends when they are no
// longer surplus (the member that joined leaves); the app's release of one
// hands it over at once; those the app does not release are handed over
// at the deadline.
func TestMemberDrainsBeforeHandingOver(t *testing.T) {
	t.Parallel()
	const drainTimeout = 10 * time.Second
	mt := startMemberWith(t, 4, func(c *Config) { c.DrainTimeout = drainTimeout }, func(*fake.Clientset) {},
		partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3))
	mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == 4 })

	mt.join("pod-b")
	mt.waitFor("partitions 2 and 3 draining", func(s ownership.State) bool { return reflect.DeepEqual(draining(s), []int{2, 3}) })
	mt.leave("pod-b")
	mt.waitFor("the drain to end", func(s ownership.State) bool { return s.Members == 1 && len(draining(s)) == 0 && len(s.Owned) == 4 })

	joined := mt.clock.Now()
	mt.join("pod-b")
	s := mt.waitFor("partitions 2 and 3 draining", func(s ownership.State) bool { return reflect.DeepEqual(draining(s), []int{2, 3}) })
	for _, o := range s.Owned[2:] {
		if !o.DrainDeadline.Equal(joined.Add(drainTimeout)) {
			t.Errorf("partition %d: drain deadline %v, want %v", o.Partition, o.DrainDeadline, joined.Add(drainTimeout))
		}
	}
	before := s.Revision
	// Draining is not releasing: they stay owned and renewed, and the gate
	// takes nothing.
	mt.advance(drainTimeout/2, "pod-b")
	mt.settle()
	s = mt.m.Snapshot()
	if len(s.Owned) != 4 || mt.holder(PartitionLease(testGroup, 3)) != testIdentity || mt.holder(PartitionLease(testGroup, 2)) != testIdentity {
		t.Fatalf("half way through the drain: %+v", s)
	}
	if mt.gateAdmits() {
		t.Errorf("gate admits while draining above the share")
	}

	// The app releases partition 3: handed over at once, without a sit-out;
	// partition 2 still drains.
	if _, err := mt.m.Release(mt.ctx, 3); err != nil {
		t.Fatalf("Release(3): %v", err)
	}
	mt.waitForLease("partition 3 released", PartitionLease(testGroup, 3), func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == ""
	})
	mt.take(3, "pod-b")
	mt.settle()
	if s := mt.m.Snapshot(); !reflect.DeepEqual(draining(s), []int{2}) || s.Revision <= before {
		t.Errorf("after the app's release: draining %v, revision %d (was %d); want [2]", draining(s), s.Revision, before)
	}

	// Nobody releases partition 2: handed over at the deadline.
	mt.advance(joined.Add(drainTimeout).Sub(mt.clock.Now())-time.Second, "pod-b")
	mt.settle()
	if mt.holder(PartitionLease(testGroup, 2)) != testIdentity {
		t.Fatalf("partition 2 handed over before its drain deadline")
	}
	mt.advance(time.Second, "pod-b")
	mt.waitForLease("partition 2 handed over at the deadline", PartitionLease(testGroup, 2), func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == ""
	})
	mt.take(2, "pod-b")
	s = mt.waitFor("pod-a at its share", func(s ownership.State) bool { return len(s.Owned) == 2 && len(draining(s)) == 0 })
	if got := ownedPartitions(s); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("owns %v, want [0 1]", got)
	}
	if n := mt.rebalances(); n != 2 {
		t.Errorf("rebalances = %v, want 2", n)
	}
}

// TestMemberDrainTakesInPartitionsDueMeanwhile: partitions that become
// surplus while a drain runs (a second member joins during it) join that
// drain with its deadline, so that the whole rebalance costs one drain
// timeout: at the deadline every surplus partition is released at once, in
// one round; none earlier, and the partitions kept keep their terms.
func TestMemberDrainTakesInPartitionsDueMeanwhile(t *testing.T) {
	t.Parallel()
	const drainTimeout = 10 * time.Second
	const n = 8
	var leases []runtime.Object
	for i := range n {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMemberWith(t, n, func(c *Config) { c.DrainTimeout = drainTimeout }, func(*fake.Clientset) {}, leases...)
	before := mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == n })

	joined := mt.clock.Now()
	mt.join("pod-b")
	mt.waitFor("partitions 4..7 draining", func(s ownership.State) bool { return reflect.DeepEqual(draining(s), []int{4, 5, 6, 7}) })
	// pod-c joins half way through: pod-a's target falls from 4 to 3
	// (8 over 3 members; it owns the most, so it keeps a larger share).
	mt.advance(drainTimeout/2, "pod-b")
	mt.join("pod-c")
	s := mt.waitFor("partition 3 to join the drain", func(s ownership.State) bool { return reflect.DeepEqual(draining(s), []int{3, 4, 5, 6, 7}) })
	for _, o := range s.Owned[3:] {
		if !o.DrainDeadline.Equal(joined.Add(drainTimeout)) {
			t.Errorf("partition %d: drain deadline %v, want the first drain's %v", o.Partition, o.DrainDeadline, joined.Add(drainTimeout))
		}
	}
	mt.advance(joined.Add(drainTimeout).Sub(mt.clock.Now())-time.Second, "pod-b", "pod-c")
	mt.settle()
	if got := ownedPartitions(mt.m.Snapshot()); len(got) != n {
		t.Fatalf("owns %v a second before the drain deadline, want all %d", got, n)
	}
	mt.advance(time.Second, "pod-b", "pod-c")
	for i := 3; i < n; i++ {
		mt.waitForLease(fmt.Sprintf("partition %d handed over at the deadline", i), PartitionLease(testGroup, i), func(l *coordinationv1.Lease) bool {
			return ptr.Deref(l.Spec.HolderIdentity, "") == ""
		})
	}
	s = mt.waitFor("pod-a at its share", func(s ownership.State) bool { return len(s.Owned) == 3 && len(draining(s)) == 0 })
	for _, i := range []int{0, 1, 2} {
		if tokenOf(s, i) != tokenOf(before, i) {
			t.Errorf("partition %d: token %d, was %d: a partition kept must keep its term", i, tokenOf(s, i), tokenOf(before, i))
		}
	}
	if n := mt.rebalances(); n != 5 {
		t.Errorf("rebalances = %v, want 5 (one per partition handed over)", n)
	}
}

// draining are the partitions s shows as draining (each with a deadline).
func draining(s ownership.State) []int {
	var out []int
	for _, o := range s.Owned {
		if o.Draining && !o.DrainDeadline.IsZero() {
			out = append(out, o.Partition)
		}
	}
	return out
}

// TestMemberDrainKeepsOutAnAcknowledgedPartition: a draining partition the
// app has released leaves the drain, and a reconcile that runs before its
// release has stopped the claim (it still sees the partition owned and
// surplus) does not put it back: at its deadline the drain would hand it
// over a second time, and the member would wait for that handover.
func TestMemberDrainKeepsOutAnAcknowledgedPartition(t *testing.T) {
	t.Parallel()
	mt := startMemberWith(t, 4, func(c *Config) { c.DrainTimeout = 10 * time.Second }, func(*fake.Clientset) {},
		partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3))
	mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == 4 })
	mt.join("pod-b")
	mt.waitFor("partitions 2 and 3 draining", func(s ownership.State) bool { return reflect.DeepEqual(draining(s), []int{2, 3}) })
	// The moment between ReleaseTerm's bookkeeping and its elector's
	// release, held open: partition 3 is acknowledged, still claimed.
	mt.m.mu.Lock()
	delete(mt.m.draining, 3)
	mt.m.acknowledged[3] = true
	mt.m.mu.Unlock()
	mt.settle()
	if s := mt.m.Snapshot(); !reflect.DeepEqual(draining(s), []int{2}) || len(s.Owned) != 4 {
		t.Errorf("draining %v, owns %v; want [2] draining, all 4 still owned", draining(s), ownedPartitions(s))
	}
	mt.m.mu.Lock()
	delete(mt.m.acknowledged, 3)
	mt.m.mu.Unlock()
}
