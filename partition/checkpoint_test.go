package partition

import (
	"errors"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"

	"github.com/leader-elector/leader-elector/ownership"
)

// TestMemberCheckpoint: a new owner sees the previous owner's checkpoint
// (the acquisition keeps it), stores its own fenced by its term, is rate
// limited per partition, and is refused once the partition has moved.
func TestMemberCheckpoint(t *testing.T) {
	t.Parallel()
	old := partitionLease(0, "", 3)
	old.Annotations = map[string]string{CheckpointAnnotation: `{"value":"offset=7","holder":"pod-z","fencingToken":3,"time":"2026-11-29T07:00:00Z"}`}
	junk := partitionLease(1, "", 3)
	junk.Annotations = map[string]string{CheckpointAnnotation: `{"value":"x"}`}
	mt := startMember(t, 2, old, junk)
	s := mt.waitFor("both partitions", func(s ownership.State) bool { return len(s.Owned) == 2 })

	c := s.Owned[0].Checkpoint
	if c == nil || c.Value != "offset=7" || c.Holder != "pod-z" || c.FencingToken != 3 {
		t.Errorf("partition 0's checkpoint after taking it: %+v, want the previous owner's", c)
	}
	if s.Owned[1].Checkpoint != nil {
		t.Errorf("partition 1's checkpoint %+v, want none: its annotation is not one a sidecar writes", s.Owned[1].Checkpoint)
	}

	stored, err := mt.m.Checkpoint(mt.ctx, 0, "offset=9")
	if err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	if stored.Holder != testIdentity || stored.FencingToken != s.Owned[0].FencingToken || stored.Value != "offset=9" {
		t.Errorf("stored %+v, want offset=9 under token %d", stored, s.Owned[0].FencingToken)
	}
	l, _ := mt.lease(PartitionLease(testGroup, 0))
	if got, ok := parseCheckpoint(l.Annotations[CheckpointAnnotation]); !ok || got.Value != "offset=9" || got.FencingToken != s.Owned[0].FencingToken {
		t.Errorf("the Lease's checkpoint annotation %q", l.Annotations[CheckpointAnnotation])
	}
	if got := mt.m.Snapshot().Owned[0].Checkpoint; got == nil || got.Value != "offset=9" {
		t.Errorf("GET /partitions's checkpoint after storing: %+v", got)
	}

	// The burst is CheckpointBurst; the first was above.
	var limited *ownership.RateLimitedError
	for range ownership.CheckpointBurst + 1 {
		if _, err = mt.m.Checkpoint(mt.ctx, 0, "offset=10"); err != nil {
			break
		}
	}
	if !errors.As(err, &limited) || limited.RetryAfter <= 0 || limited.RetryAfter > testRetryPeriod {
		t.Errorf("checkpoints in a row: %v, want rate-limited with a retry within the retry period", err)
	}
	// Another partition has a limit of its own.
	if _, err := mt.m.Checkpoint(mt.ctx, 1, "a"); err != nil {
		t.Errorf("partition 1's first checkpoint: %v", err)
	}

	for _, tc := range []struct {
		value string
		i     int
		want  error
	}{
		{"x", 2, ownership.ErrOutOfRange},
		{string(make([]byte, ownership.MaxCheckpointBytes+1)), 1, ownership.ErrCheckpointTooLarge},
		{"\xff", 1, ownership.ErrCheckpointNotText},
	} {
		if _, err := mt.m.Checkpoint(mt.ctx, tc.i, tc.value); !errors.Is(err, tc.want) {
			t.Errorf("ownership.Checkpoint(%d, %d bytes): %v, want %v", tc.i, len(tc.value), err, tc.want)
		}
	}

	// Partition 1 moves to pod-b (as if pod-a's claim had lapsed): pod-a's
	// checkpoints of it are refused and the stored one stays pod-b's.
	mt.take(1, "pod-b")
	mt.waitFor("partition 1 lost", func(s ownership.State) bool { return len(s.Owned) == 1 })
	mt.write(PartitionLease(testGroup, 1), func(l *coordinationv1.Lease) {
		l.Annotations[CheckpointAnnotation] = `{"value":"b","holder":"pod-b","fencingToken":4,"time":"2026-11-29T08:00:00Z"}`
	})
	if _, err := mt.m.Checkpoint(mt.ctx, 1, "late"); !errors.Is(err, ownership.ErrNotOwned) {
		t.Errorf("checkpoint of a partition that moved: %v, want ownership.ErrNotOwned", err)
	}
	l, _ = mt.lease(PartitionLease(testGroup, 1))
	if got, _ := parseCheckpoint(l.Annotations[CheckpointAnnotation]); got.Holder != "pod-b" {
		t.Errorf("partition 1's checkpoint %q, want pod-b's", l.Annotations[CheckpointAnnotation])
	}
}
