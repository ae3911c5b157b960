package supervisor

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/leader-elector/leader-elector/api"
)

// Mono is a reading of CLOCK_MONOTONIC, the clock the supervisor and its
// watchdog share: a number one process can hand another through a pipe
// and both read the same way (Go's own monotonic readings are relative to
// each process's start, so they cannot cross a process boundary).
type Mono time.Duration

// Clock reads the wall clock and CLOCK_MONOTONIC; tests give a fake one.
type Clock interface {
	Wall() time.Time
	Mono() Mono
}

type systemClock struct{}

func (systemClock) Wall() time.Time { return time.Now() }

func (systemClock) Mono() Mono { return monoNow() }

func monoNow() Mono {
	var ts unix.Timespec
	// CLOCK_MONOTONIC cannot fail on Linux with a valid pointer.
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return Mono(ts.Nano())
}

// Observation is one answer of GET /leader (or its error) with the moment
// its request was sent, on both clocks, and the moment the answer came.
type Observation struct {
	SentWall time.Time
	SentMono Mono
	RecvMono Mono
	Leader   api.Leader
	Err      error
}

// Deadline is the moment, on CLOCK_MONOTONIC, at which the claim an answer
// shows ends: validUntil taken as an offset from the wall-clock moment the
// request was sent and added to the monotonic moment it was sent. The
// sidecar runs on the same machine and clock, and it wrote validUntil
// before it answered, so the result is never later than its own claim
// unless the wall clock was stepped back in between. What such a step can
// add is capped: when it answered, the sidecar claimed less than a lease
// duration ahead (its renew deadline is shorter), so the deadline is never
// beyond the answer's arrival + a lease duration. (The cap counts from the
// arrival, not the send: a long-poll may be answered long after it was
// sent.) An answer that is not a claim gives the send moment: nothing is
// extended.
func Deadline(o Observation) Mono {
	l := o.Leader
	if o.Err != nil || !l.IsLeader || l.ValidUntil.IsZero() {
		return o.SentMono
	}
	d := o.SentMono + Mono(l.ValidUntil.Sub(o.SentWall.Round(0)))
	if limit := max(o.RecvMono, o.SentMono) + Mono(time.Duration(l.LeaseDurationSeconds)*time.Second); d > limit {
		d = limit
	}
	return max(d, o.SentMono)
}

// RenewDeadline is the sidecar's --renew-deadline as an answer shows it:
// validUntil is the last renewal's start + the renew deadline, and the
// Lease's renewTime (written by this pod's sidecar, which holds it) is
// that start to the Lease's microsecond, on the same clock. Zero if the
// answer does not show both.
func RenewDeadline(l api.Leader) time.Duration {
	if !l.IsLeader || l.ValidUntil.IsZero() || l.RenewTime.IsZero() {
		return 0
	}
	return l.ValidUntil.Sub(l.RenewTime.Time)
}

// Term is what the supervisor knows of this pod's leadership: the latest
// answer's revision and, while it leads, the term's token and the latest
// deadline of its claim.
type Term struct {
	known    bool
	Revision uint64
	Leading  bool
	Token    int64
	// Deadline is meaningful only while Leading.
	Deadline Mono
	// Leader is the latest answer taken.
	Leader api.Leader
}

// Observe takes one answer. A failed request teaches nothing (it extends
// no deadline: the claim runs out on its own). An answer older than one
// already taken (a smaller revision: a long-poll answered late) is
// ignored. Renewals do not bump the revision, so answers of the same term
// keep the latest deadline any of them shows. It reports whether the
// leadership (leading, token) changed.
func (t *Term) Observe(o Observation) bool {
	if o.Err != nil {
		return false
	}
	l := o.Leader
	if t.known && l.Revision < t.Revision {
		return false
	}
	wasLeading, wasToken := t.Leading, t.Token
	t.known, t.Revision, t.Leader = true, l.Revision, l
	if !l.IsLeader {
		t.Leading = false
		return wasLeading
	}
	d := Deadline(o)
	if wasLeading && wasToken == l.FencingToken && t.Deadline > d {
		d = t.Deadline
	}
	t.Leading, t.Token, t.Deadline = true, l.FencingToken, d
	return !wasLeading || wasToken != l.FencingToken
}

// Valid reports whether the claim still holds at now.
func (t *Term) Valid(now Mono) bool { return t.Leading && now < t.Deadline }
