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

	"github.com/leader-elector/leader-elector/election"
)

// CheckpointAnnotation is the annotation on a partition's Lease that holds
// its last checkpoint: JSON naming the term that wrote it,
// {"holder":"pod-a","fencingToken":42,"value":"…","time":"…"}. It stays on the
// Lease across terms (renewals, releases and acquisitions keep the Lease's
// annotations), so the next owner reads the previous owner's checkpoint.
const CheckpointAnnotation = "leader-elector.io/checkpoint"

// MaxCheckpointBytes bounds a checkpoint's value: an offset, a sequence
// number or a small JSON document fits; the Lease is renewed every retry
// period and read by every member's watch, so it must stay small.
const MaxCheckpointBytes = 1024

// maxCheckpointAnnotationBytes bounds the annotation a reader parses: the
// value escaped as JSON (at most 6 bytes a byte), a holder and a time.
// Anyone who can write the Lease can write the annotation; a larger value is
// not ours and is ignored unread.
const maxCheckpointAnnotationBytes = 6*MaxCheckpointBytes + 512

// CheckpointBurst is how many checkpoints of one partition may be written
// in a row; after that, one per retry period (see Member.Checkpoint).
const CheckpointBurst = 2

// Errors of Checkpoint besides ErrOutOfRange and ErrNotOwned.
var (
	// ErrCheckpointTooLarge: the value is longer than MaxCheckpointBytes.
	ErrCheckpointTooLarge = fmt.Errorf("a checkpoint is at most %d bytes", MaxCheckpointBytes)
	// ErrCheckpointNotText: the value is not UTF-8 text.
	ErrCheckpointNotText = errors.New("a checkpoint must be UTF-8 text (encode binary values, e.g. as base64)")
	// ErrCheckpointRefused wraps every fencing refusal: the claim expired,
	// the term changed, the Lease kept changing.
	ErrCheckpointRefused = errors.New("checkpoint refused")
)

// RateLimitedError says that a partition's checkpoints came faster than
// the rate limit allows; RetryAfter is when the next one would be.
type RateLimitedError struct {
	Partition  int
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("partition %d: checkpoints are limited to %d in a row, then one per retry period; retry after %v", e.Partition, CheckpointBurst, e.RetryAfter)
}

// Checkpoint is the last checkpoint stored with a partition.
type Checkpoint struct {
	// Value is what the owner stored.
	Value string `json:"value"`
	// Holder and FencingToken name the term that wrote it: the previous
	// owner's for a partition this pod has just taken.
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
	// Time is when the owner asked to store it (its own clock).
	Time time.Time `json:"time"`
}

// parseCheckpoint reads the annotation's value; false if it is not one a
// sidecar writes.
func parseCheckpoint(value string) (Checkpoint, bool) {
	if len(value) > maxCheckpointAnnotationBytes {
		return Checkpoint{}, false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var c Checkpoint
	if err := dec.Decode(&c); err != nil || dec.More() || c.Holder == "" || len(c.Value) > MaxCheckpointBytes {
		return Checkpoint{}, false
	}
	return c, true
}

// checkpoint returns partition i's last checkpoint as this pod has seen it.
func (m *Member) checkpoint(i int) *Checkpoint {
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
	return rate.NewLimiter(rate.Every(retryPeriod), CheckpointBurst)
}

// Checkpoint stores value as partition i's checkpoint on its Lease, fenced
// by this pod's term: only while this pod owns i, its claim is valid and
// its term is the Lease's current one (a conditional update; see
// election.Elector.Annotate). Errors: ErrOutOfRange, ErrNotOwned,
// ErrCheckpointTooLarge, ErrCheckpointNotText, a *RateLimitedError, or
// ErrCheckpointRefused wrapping the reason the term refused it.
func (m *Member) Checkpoint(ctx context.Context, i int, value string) (Checkpoint, error) {
	return m.CheckpointTerm(ctx, i, election.AnyTerm, value)
}

// CheckpointTerm is Checkpoint in the term token of partition i (the
// fencing token the app was given when it started working on i;
// election.AnyTerm: this pod's current term). A worker left over from an
// earlier term of this pod is refused with ErrCheckpointRefused wrapping
// election.ErrTermChanged, so its checkpoint never lands under the
// current term's token. The term is checked by the conditional write
// itself (election.Elector.Annotate), not before it.
func (m *Member) CheckpointTerm(ctx context.Context, i int, token int64, value string) (Checkpoint, error) {
	c, err := m.writeCheckpoint(ctx, i, token, value)
	m.metrics.observeCheckpoint(err)
	return c, err
}

func (m *Member) writeCheckpoint(ctx context.Context, i int, token int64, value string) (Checkpoint, error) {
	if i < 0 || i >= len(m.partitions) {
		return Checkpoint{}, fmt.Errorf("%w: %d (the group has partitions 0..%d)", ErrOutOfRange, i, len(m.partitions)-1)
	}
	if len(value) > MaxCheckpointBytes {
		return Checkpoint{}, fmt.Errorf("%w, got %d", ErrCheckpointTooLarge, len(value))
	}
	if !utf8.ValidString(value) {
		return Checkpoint{}, ErrCheckpointNotText
	}
	s := m.partitions[i].Snapshot()
	if !s.IsLeader {
		return Checkpoint{}, fmt.Errorf("%w: %d", ErrNotOwned, i)
	}
	switch {
	case token == election.AnyTerm:
		token = s.FencingToken
	case token != s.FencingToken:
		// Refused before the rate limit, so that a stale worker cannot
		// spend the current one's checkpoints. Annotate checks it again,
		// with the write.
		return Checkpoint{}, fmt.Errorf("%w: partition %d: %w (current %d, given %d)", ErrCheckpointRefused, i, election.ErrTermChanged, s.FencingToken, token)
	}
	if r := m.checkpointLimits[i].Reserve(); r.Delay() > 0 {
		r.Cancel()
		return Checkpoint{}, &RateLimitedError{Partition: i, RetryAfter: r.Delay()}
	}
	c := Checkpoint{Value: value, Holder: m.cfg.Identity, FencingToken: token, Time: m.clock.Now().UTC().Truncate(time.Microsecond)}
	encoded, err := json.Marshal(c)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("encode checkpoint: %w", err)
	}
	start := m.clock.Now()
	err = m.partitions[i].Annotate(ctx, token, CheckpointAnnotation, string(encoded))
	switch {
	case errors.Is(err, election.ErrNotLeader):
		return Checkpoint{}, fmt.Errorf("%w: %d", ErrNotOwned, i)
	case errors.Is(err, election.ErrNotAnnotated):
		return Checkpoint{}, fmt.Errorf("%w: partition %d: %w", ErrCheckpointRefused, i, err)
	case err != nil:
		return Checkpoint{}, err
	}
	m.metrics.checkpointDuration.Observe(m.clock.Since(start).Seconds())
	return c, nil
}
