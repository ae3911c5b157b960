package partition

import (
	"errors"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// TestMemberTermScopedWrites: a checkpoint and a release naming an
// earlier term of a partition this pod owns are refused and change
// nothing (the stored checkpoint stays the current term's, the partition
// stays owned); naming the current term, both go through.
func TestMemberTermScopedWrites(t *testing.T) {
	t.Parallel()
	mt := startMember(t, 1, partitionLease(0, "", 3))
	s := mt.waitFor("partition 0", func(s ownership.State) bool { return len(s.Owned) == 1 })
	current := s.Owned[0].FencingToken
	stale := current - 1
	lease := PartitionLease(testGroup, 0)

	if _, err := mt.m.CheckpointTerm(mt.ctx, 0, current, "offset=2000"); err != nil {
		t.Fatalf("the current term's checkpoint: %v", err)
	}
	_, err := mt.m.CheckpointTerm(mt.ctx, 0, stale, "offset=1042")
	if !errors.Is(err, ownership.ErrCheckpointRefused) || !errors.Is(err, leadership.ErrTermChanged) {
		t.Errorf("a checkpoint of term %d while term %d is current: %v, want refused, term changed", stale, current, err)
	}
	l, _ := mt.lease(lease)
	if c, ok := parseCheckpoint(l.Annotations[CheckpointAnnotation]); !ok || c.Value != "offset=2000" || c.FencingToken != current {
		t.Errorf("the Lease's checkpoint after a stale one: %q, want offset=2000 of term %d", l.Annotations[CheckpointAnnotation], current)
	}

	if _, err := mt.m.ReleaseTerm(mt.ctx, 0, stale); !errors.Is(err, leadership.ErrOtherTerm) {
		t.Errorf("a release of term %d while term %d is current: %v, want ErrOtherTerm", stale, current, err)
	}
	if got := tokenOf(mt.m.Snapshot(), 0); got != current || mt.holder(lease) != testIdentity {
		t.Errorf("after a stale release: owned in term %d, holder %q; want term %d, %q", got, mt.holder(lease), current, testIdentity)
	}
	if _, err := mt.m.ReleaseTerm(mt.ctx, 0, current); err != nil {
		t.Fatalf("releasing the current term: %v", err)
	}
	mt.waitForLease("partition 0 released", lease, func(l *coordinationv1.Lease) bool {
		return l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == ""
	})
}
