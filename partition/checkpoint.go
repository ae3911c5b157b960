package partition

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// CheckpointAnnotation is the annotation on a partition's Lease that holds
// its last checkpoint: JSON naming the term that wrote it,
// {"holder":"pod-a","fencingToken":42,"value":"…","time":"…"}. It stays on the
// Lease across terms (renewals, releases and acquisitions keep the Lease's
// annotations), so the next owner reads the previous owner's checkpoint.
const CheckpointAnnotation = "leader-elector.io/checkpoint"

// maxCheckpointAnnotationBytes bounds the annotation a reader parses: the
// value escaped as JSON (at most 6 bytes a byte), a holder and a time.
// Anyone who can write the Lease can write the annotation; a larger value is
// not ours and is ignored unread.
const maxCheckpointAnnotationBytes = 6*ownership.MaxCheckpointBytes + 512

// parseCheckpoint reads the annotation's value; false if it is not one a
// sidecar writes.
func parseCheckpoint(value string) (ownership.Checkpoint, bool) {
	if len(value) > maxCheckpointAnnotationBytes {
		return ownership.Checkpoint{}, false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var c ownership.Checkpoint
	if err := dec.Decode(&c); err != nil || dec.More() || c.Holder == "" || len(c.Value) > ownership.MaxCheckpointBytes {
		return ownership.Checkpoint{}, false
	}
	return c, true
}

// checkpoint returns partition i's last checkpoint as this pod has seen it.
func (m *Member) checkpoint(i int) *ownership.Checkpoint {
	value, ok := m.partitions[i].Annotation(CheckpointAnnotation)
	if !ok {
		return nil
	}
	c, ok := parseCheckpoint(value)
	if !ok {
		return nil
	}
	return &c
}

// newCheckpointLimiter is the rate limit of one partition's checkpoints:
// one per retry period on average, CheckpointBurst in a row. A pod renews
// each Lease it owns once per retry period, and partition mode's client
// rate allows twice that (options derive it), so checkpoints of every
// owned partition at the limit fit beside the renewals.
func newCheckpointLimiter(retryPeriod time.Duration) *rate.Limiter {
	return rate.NewLimiter(rate.Every(retryPeriod), ownership.CheckpointBurst)
}

// Checkpoint stores value as partition i's checkpoint on its Lease, fenced
// by this pod's term: only while this pod owns i, its claim is valid and
// its term is the Lease's current one (a conditional update; see
// election.Elector.Annotate). Errors: ErrOutOfRange, ErrNotOwned,
// ErrCheckpointTooLarge, ErrCheckpointNotText, a *RateLimitedError, or
// ErrCheckpointRefused wrapping the reason the term refused it.
func (m *Member) Checkpoint(ctx context.Context, i int, value string) (ownership.Checkpoint, error) {
	return m.CheckpointTerm(ctx, i, leadership.AnyTerm, value)
}

// CheckpointTerm is Checkpoint in the term token of partition i (the
// fencing token the app was given when it started working on i;
// leadership.AnyTerm: this pod's current term). A worker left over from an
// earlier term of this pod is refused with ErrCheckpointRefused wrapping
// leadership.ErrTermChanged, so its checkpoint never lands under the
// current term's token. The term is checked by the conditional write
// itself (election.Elector.Annotate), not before it.
func (m *Member) CheckpointTerm(ctx context.Context, i int, token int64, value string) (ownership.Checkpoint, error) {
	c, err := m.writeCheckpoint(ctx, i, token, value)
	m.metrics.observeCheckpoint(err)
	return c, err
}

func (m *Member) writeCheckpoint(ctx context.Context, i int, token int64, value string) (ownership.Checkpoint, error) {
	if i < 0 || i >= len(m.partitions) {
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d (the group has partitions 0..%d)", ownership.ErrOutOfRange, i, len(m.partitions)-1)
	}
	if len(value) > ownership.MaxCheckpointBytes {
		return ownership.Checkpoint{}, fmt.Errorf("%w, got %d", ownership.ErrCheckpointTooLarge, len(value))
	}
	if !utf8.ValidString(value) {
		return ownership.Checkpoint{}, ownership.ErrCheckpointNotText
	}
	s := m.partitions[i].Snapshot()
	if !s.IsLeader {
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	}
	switch {
	case token == leadership.AnyTerm:
		token = s.FencingToken
	case token != s.FencingToken:
		// Refused before the rate limit, so that a stale worker cannot
		// spend the current one's checkpoints. Annotate checks it again,
		// with the write.
		return ownership.Checkpoint{}, fmt.Errorf("%w: partition %d: %w (current %d, given %d)", ownership.ErrCheckpointRefused, i, leadership.ErrTermChanged, s.FencingToken, token)
	}
	// On the member's clock, not the limiter's own: tests step it, and a
	// loaded test machine must not refill the bucket between two writes.
	now := m.clock.Now()
	if r := m.checkpointLimits[i].ReserveN(now, 1); r.DelayFrom(now) > 0 {
		wait := r.DelayFrom(now)
		r.CancelAt(now)
		return ownership.Checkpoint{}, &ownership.RateLimitedError{Partition: i, RetryAfter: wait}
	}
	c := ownership.Checkpoint{Value: value, Holder: m.cfg.Identity, FencingToken: token, Time: m.clock.Now().UTC().Truncate(time.Microsecond)}
	encoded, err := json.Marshal(c)
	if err != nil {
		return ownership.Checkpoint{}, fmt.Errorf("encode checkpoint: %w", err)
	}
	start := m.clock.Now()
	err = m.partitions[i].Annotate(ctx, token, CheckpointAnnotation, string(encoded))
	switch {
	case errors.Is(err, leadership.ErrNotLeader):
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case errors.Is(err, leadership.ErrNotAnnotated):
		return ownership.Checkpoint{}, fmt.Errorf("%w: partition %d: %w", ownership.ErrCheckpointRefused, i, err)
	case err != nil:
		return ownership.Checkpoint{}, err
	}
	m.metrics.checkpointDuration.Observe(m.clock.Since(start).Seconds())
	return c, nil
}
