// Package leadership is the state of one Lease as this pod and its app see
// it: who holds it, whether this pod leads, the term's fencing token, why
// leadership changed, and the errors of the requests that act on a term.
// It holds values and names only, no client: package election produces
// them, and the HTTP API (which must not link client-go) reads them.
package leadership

import "time"

// State is a point-in-time view of the election as this pod sees it. It is a
// value: readers get a copy and may keep it.
type State struct {
	// Namespace and Name identify the Lease.
	Namespace, Name string
	// Identity is this candidate's holder identity.
	Identity string
	// Holder is the identity the Lease names, or "" when no one holds it:
	// never acquired, released, or not renewed for a whole lease duration as
	// far as this pod has observed.
	Holder string
	// IsLeader is true only while this pod holds the Lease and its last
	// successful renewal started less than the renew deadline ago, measured on
	// the monotonic clock when the State was taken.
	IsLeader bool
	// FencingToken is the Lease's spec.leaseTransitions for the current
	// holder's term. It never goes back: it is the highest token this
	// process has seen on the Lease, so it keeps the last known value while
	// no one holds the Lease, and across a deletion or replacement of the
	// Lease object (see docs/safety.md).
	FencingToken int64
	// LeaseDurationSeconds is the duration the current record asks for.
	LeaseDurationSeconds int32
	// RenewTime is the Lease's spec.renewTime as last observed; zero if unknown.
	RenewTime time.Time
	// LeaderSince is the local time at which this pod's current claim began;
	// zero unless IsLeader.
	LeaderSince time.Time
	// ValidUntil is the wall-clock moment after which this pod stops claiming
	// leadership unless it renews; zero unless IsLeader. It is advisory
	// across a step of the wall clock; Deadline is not.
	ValidUntil time.Time
	// Deadline is ValidUntil with the monotonic clock reading that the
	// claim is measured on (when the State was taken from the real clock):
	// code in this process that must stop at the end of the claim measures
	// the time left from it, so that a step of the wall clock cannot extend
	// it. Zero unless IsLeader; it does not survive serialisation.
	Deadline time.Time
	// HolderAddress is the address the holder advertises
	// (--advertise-address) for its current term, or "" when there is no
	// holder or its term published none. It is only ever the address the
	// holder named in FencingToken wrote with that term, never one of an
	// ended term.
	HolderAddress string
	// Revision increases by one on every change of Holder, IsLeader,
	// FencingToken, LeaderSince, HolderAddress or Degraded. It starts
	// from a value taken from the wall clock when the process starts
	// (microseconds since 1970), so that the revisions of a restarted sidecar do not repeat those of the
	// process before it, and a long-poll carrying an old revision is
	// answered at once.
	Revision uint64
	// LastChange is this pod's last change of leadership (became leader or
	// stopped leading) and why; zero before the first.
	LastChange Change
	// LastLost is this pod's last change from leader to not leader (the
	// end of its last term) and why; zero before the first. It is what the
	// "lost" events are made of: a stream that missed the states between
	// two reads still sees that a term ended.
	LastLost Change
	// Degraded, when not empty, says why this pod's leadership (or
	// candidacy) is degraded: it goes on, but something its owner watches
	// is wrong (an unhealthy app with no healthy candidate to take over).
	// Set with election.Elector.SetDegraded; a change bumps the revision.
	Degraded string
	// Successor is, while IsLeader, the candidate this pod would name if
	// it released now (election.SuccessorAnnotation; health gating's
	// candidates), "" for none. It is looked up when the State is read
	// and is not part of Revision.
	Successor string
}

// Reason says why this pod's leadership changed. The values are a fixed
// vocabulary: they appear in the log line and the Event of every change,
// and operators and alerts match them.
type Reason string

const (
	// ReasonAcquired: this pod wrote itself into the Lease as a new term
	// and became leader.
	ReasonAcquired Reason = "acquired"
	// ReasonReleased: the leader stepped down on request (POST /release,
	// or a partition handed over).
	ReasonReleased Reason = "released"
	// ReasonShutdown: the leader stopped because the process is shutting
	// down (SIGTERM).
	ReasonShutdown Reason = "shutdown"
	// ReasonRenewDeadline: the leader's last successful renewal started a
	// renew deadline ago (the API server did not answer in time, or the
	// process was paused).
	ReasonRenewDeadline Reason = "renew-deadline"
	// ReasonTakenOver: the Lease was observed to name another holder or
	// another term than this pod's.
	ReasonTakenOver Reason = "taken-over"
	// ReasonLeaseDeleted: the Lease was observed deleted (or not found).
	ReasonLeaseDeleted Reason = "lease-deleted"
	// ReasonAppUnhealthy: the leader stepped down because its app failed
	// its health checks while another candidate was healthy.
	ReasonAppUnhealthy Reason = "app-unhealthy"
	// ReasonHandedOver: the leader, of an older revision, handed over to a
	// ready candidate of the newest revision (a rollout).
	ReasonHandedOver Reason = "handed-over"
)

// Reasons is the whole vocabulary, in a fixed order (metrics are
// initialised with every reason, so that a rate over them starts at 0).
var Reasons = []Reason{ReasonAcquired, ReasonReleased, ReasonShutdown, ReasonRenewDeadline, ReasonTakenOver, ReasonLeaseDeleted, ReasonAppUnhealthy, ReasonHandedOver}

// Change is one change of this pod's leadership.
type Change struct {
	// Leader is true when this pod became leader, false when it stopped.
	Leader bool
	// Reason is why.
	Reason Reason
	// At is when, by the local wall clock: for ReasonRenewDeadline the
	// moment the claim ran out, otherwise when the change was observed.
	At time.Time
	// FencingToken is the token of the term the change is about.
	FencingToken int64
}
