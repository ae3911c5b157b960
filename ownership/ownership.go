// Package ownership is a pod's partitions as its app sees them in
// partition mode: which it owns, in which term, until when, their last
// checkpoints, and the errors of the requests that act on them. It holds
// values and names only, no client: package partition produces them, and
// the HTTP API (which must not link client-go) reads them.
package ownership

import (
	"errors"
	"fmt"
	"time"
)

// State is this pod's view of its group at one moment. It is a value:
// readers get a copy and may keep it.
type State struct {
	// Namespace and Name identify the group.
	Namespace, Name string
	// Identity is this pod's identity.
	Identity string
	// Partitions is N, this pod's --partitions.
	Partitions int
	// LeaseDuration is the partition Leases' duration (--lease-duration):
	// no claim runs longer ahead than it.
	LeaseDuration time.Duration
	// EffectivePartitions is the N the group works with (partition.EffectiveN): the
	// smallest N of the live members, at most Partitions. It differs from
	// Partitions only while the members disagree on N (a rolling update
	// that changes it); no member takes a partition at or above it, and
	// one it owns there is draining.
	EffectivePartitions int
	// Members counts the live members, this pod included once it holds its
	// membership Lease.
	Members int
	// Member: this pod holds its membership Lease.
	Member bool
	// Owned are the partitions this pod owns, in order. Ownership is
	// time-bounded like leadership: each is claimed only until its
	// ValidUntil.
	Owned []Owned
	// FairShareMin and FairShareMax are ⌊N/M⌋ and ⌈N/M⌉ of the effective N.
	FairShareMin, FairShareMax int
	// Revision increases by one on every change of Members, of the
	// effective N or of the owned partitions, their fencing tokens and
	// whether they are draining, and of Degraded.
	Revision uint64
	// Degraded is true while health gating cannot work as meant: every
	// member's app is unhealthy, so the partitions stay where they are;
	// DegradedReason says so.
	Degraded       bool
	DegradedReason string
}

// Owned is one partition this pod owns.
type Owned struct {
	Partition int
	// FencingToken is the partition Lease's leaseTransitions for this
	// pod's term; it strictly increases from one owner to the next.
	FencingToken int64
	// Since is when this pod's claim began; ValidUntil is when it ends
	// unless renewed.
	Since, ValidUntil time.Time
	// RenewTime is the partition Lease's spec.renewTime as this pod last
	// wrote it: its last renewal's start (ValidUntil − RenewTime is the
	// renew deadline).
	RenewTime time.Time
	// Deadline is ValidUntil with the monotonic clock reading the claim is
	// measured on (leadership.State.Deadline): what is left of the claim,
	// measured from it, does not move with a step of the wall clock. It
	// does not survive serialisation.
	Deadline time.Time
	// Draining: this pod is to hand the partition over (it owns more than
	// its fair share); the app should finish, checkpoint and release it
	// before DrainDeadline, when the pod releases it anyway. It stays owned,
	// and renewed, until then.
	Draining      bool
	DrainDeadline time.Time
	// Checkpoint is the last checkpoint stored with the partition, by this
	// pod or an earlier owner; nil if none. A change of it alone does not
	// change the Revision.
	Checkpoint *Checkpoint
}

// ErrOutOfRange is returned for a partition number outside 0..N-1.
var ErrOutOfRange = errors.New("no such partition")

// ErrNotOwned is returned by partition.Member.Release for a partition this pod does not own.
var ErrNotOwned = errors.New("this pod does not own the partition")

// MaxCheckpointBytes bounds a checkpoint's value: an offset, a sequence
// number or a small JSON document fits; the Lease is renewed every retry
// period and read by every member's watch, so it must stay small.
const MaxCheckpointBytes = 1024

// CheckpointBurst is how many checkpoints of one partition may be written
// in a row; after that, one per retry period (see partition.Member.Checkpoint).
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
