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
// its request was sent and the moment the answer's first byte came, on
// both clocks (RecvWall zero: not known).
type Observation struct {
	SentWall time.Time
	SentMono Mono
	RecvWall time.Time
	RecvMono Mono
	Leader   api.Leader
	Err      error
	// Partition mode only (Config.Partition): the partition's claim is
	// draining, to be handed over by DrainDeadline; Partitions is the
	// group's N.
	Draining      bool
	DrainDeadline time.Time
	Partitions    int
}

// wallStepTolerance is how far the wall clock may run from the monotonic
// one over a request before the supervisor takes it for a step: NTP's
// slewing moves it at most 500 ppm in the kernel (15 ms over a long-poll's
// 30 s). A faster slew counts as a step, which is the safe side. A step
// within it makes the deadline later than the claim's end by no more than
// itself, which killAhead covers.
const wallStepTolerance = 20 * time.Millisecond

// Deadline is the moment, on CLOCK_MONOTONIC, at which the claim an answer
// shows ends. An answer that is not a claim gives the send moment: nothing
// is extended.
//
// The sidecar (the same binary, on the same machine) says how much of its
// claim was left when it wrote the answer, validForMs, on its monotonic
// clock. It wrote the answer between the request's send and the arrival of
// the answer's first byte, so the claim ends within [sent + validForMs,
// arrival + validForMs]; neither end depends on the wall clock. The
// wall-clock arithmetic below picks the exact moment inside that window
// when the wall clock did not step, and is clamped into it when it did.
// The upper end is late by the answer's transit, from the sidecar's write
// to the supervisor's reading of its clock, which includes any delay in
// scheduling the supervisor (CPU throttling, GC): so a step seen during the
// request (the wall clock's elapsed time differs from the monotonic one's
// by more than wallStepTolerance) takes the lower end, always safe. A step
// back before the send is not seen that way and can add at most that
// transit; a step forward only makes the deadline earlier. The window
// matters for long-polls, which may be written long after they were sent.
//
// An answer without validForMs (a sidecar older than the field) gets the
// wall-clock arithmetic alone, capped at the answer's arrival + a lease
// duration (the sidecar claimed less than that ahead when it answered: its
// renew deadline is shorter).
func Deadline(o Observation) Mono {
	l := o.Leader
	if o.Err != nil || !l.IsLeader || l.ValidUntil.IsZero() && l.ValidForMs == nil {
		return o.SentMono
	}
	recv := max(o.RecvMono, o.SentMono)
	if l.ValidForMs != nil {
		// The sidecar never claims more than a lease duration ahead; the
		// bound also keeps a malformed value from overflowing.
		ms := min(max(*l.ValidForMs, 0), int64(max(l.LeaseDurationSeconds, 0))*1000)
		validFor := Mono(time.Duration(ms) * time.Millisecond)
		low, high := o.SentMono+validFor, recv+validFor
		if l.ValidUntil.IsZero() || wallStepped(o) {
			return low
		}
		return min(max(wallDeadline(o), low), high)
	}
	d := wallDeadline(o)
	if limit := recv + Mono(time.Duration(l.LeaseDurationSeconds)*time.Second); d > limit {
		d = limit
	}
	return max(d, o.SentMono)
}

// wallStepped reports whether the wall clock was seen to step (or slew
// faster than NTP does) between the request's send and the answer's
// arrival.
func wallStepped(o Observation) bool {
	if o.RecvWall.IsZero() {
		return false
	}
	// Round(0): the difference of the wall readings, not of Go's monotonic
	// ones.
	wall := o.RecvWall.Round(0).Sub(o.SentWall.Round(0))
	mono := time.Duration(o.RecvMono - o.SentMono)
	return wall-mono > wallStepTolerance || mono-wall > wallStepTolerance
}

// wallDeadline is validUntil taken as an offset from the wall-clock moment
// the request was sent and added to the monotonic moment it was sent: the
// claim's end, unless the wall clock stepped since the claim's renewal.
func wallDeadline(o Observation) Mono {
	return o.SentMono + Mono(o.Leader.ValidUntil.Sub(o.SentWall.Round(0)))
}

// drainBy is the answer's DrainDeadline on CLOCK_MONOTONIC, taken as an
// offset from the request's send on the wall clock (the sidecar runs on
// the same machine). It bounds how long a drained child may take, not the
// claim: the claim's Deadline does that, whatever the wall clock does.
func drainBy(o Observation) Mono {
	if o.DrainDeadline.IsZero() {
		return o.SentMono
	}
	return max(o.SentMono+Mono(o.DrainDeadline.Sub(o.SentWall.Round(0))), o.SentMono)
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
	// Partition mode only: Draining, the claim is to be handed over, its
	// child stopped by DrainBy (on CLOCK_MONOTONIC; the claim's Deadline
	// still bounds it);
	// Partitions is the group's N as last answered.
	Draining   bool
	DrainBy    Mono
	Partitions int
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
	t.known, t.Revision, t.Leader, t.Partitions = true, l.Revision, l, o.Partitions
	if !l.IsLeader {
		t.Leading, t.Draining = false, false
		return wasLeading
	}
	d := Deadline(o)
	sameTerm := wasLeading && wasToken == l.FencingToken
	if sameTerm && t.Deadline > d {
		d = t.Deadline
	}
	if !sameTerm {
		t.Draining = false
	}
	// A drain, once begun, is not taken back within the term: its child
	// has been told to stop.
	if o.Draining && !t.Draining {
		t.Draining, t.DrainBy = true, drainBy(o)
	}
	t.Leading, t.Token, t.Deadline = true, l.FencingToken, d
	return !sameTerm
}

// Valid reports whether the claim still holds at now.
func (t *Term) Valid(now Mono) bool { return t.Leading && now < t.Deadline }
