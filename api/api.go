// Package api is the Go side of leader-elector's application API: the JSON
// types of GET /leader, GET /partitions, POST /release, POST
// /partitions/<i>/release, PUT /partitions/<i>/checkpoint and of every error
// answer, and a small client for
// them. The types are the wire contract documented in docs/api.md and
// docs/partitions.md: the sidecar encodes its answers with them, so the
// format is defined once.
//
// It depends on the standard library only, so a Go application can import
// it without pulling in client-go.
package api

import (
	"net/http"
	"strconv"
	"time"
)

// Lease names the Lease an answer is about.
type Lease struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Leader is the answer of GET /leader and POST /release, and the data of
// the "leader" events of GET /events.
type Leader struct {
	Lease    Lease  `json:"lease"`
	Identity string `json:"identity"`
	// Holder holds the Lease; "" if no one does.
	Holder string `json:"holder"`
	// IsLeader is true only while this pod holds the Lease and its last
	// renewal started less than the renew deadline ago.
	IsLeader bool `json:"isLeader"`
	// FencingToken is the current holder's term; it only grows.
	FencingToken         int64 `json:"fencingToken"`
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`
	// RenewTime is zero until the Lease has been seen.
	RenewTime Time `json:"renewTime,omitzero"`
	// LeaderSince and ValidUntil are set only while IsLeader: when this
	// pod's claim began, and the moment after which it stops claiming
	// unless it renews.
	LeaderSince Time `json:"leaderSince,omitzero"`
	ValidUntil  Time `json:"validUntil,omitzero"`
	// ValidForMs is how many milliseconds of this pod's claim were left
	// when the sidecar wrote the answer, measured on its monotonic clock
	// and rounded down: unlike ValidUntil, a step of the wall clock does
	// not move it. A request sent at t (on the caller's monotonic clock)
	// may count on the claim until t + ValidForMs, whatever the wall clock
	// does; for an answer that waited (a long-poll), count from its
	// arrival, less the moment the answer takes on loopback. Set only
	// while IsLeader (0 when less than a millisecond was left), and only
	// in answers (GET /leader, POST /acquire, POST /release): events and
	// change notifications are read later than they are written, so they
	// leave it out.
	ValidForMs *int64 `json:"validForMs,omitempty"`
	// HolderAddress is the host:port the holder advertises for its current
	// term (--advertise-address), for a follower to forward requests to;
	// left out when there is no holder or its term published none. It is
	// never the address of a term that has ended.
	HolderAddress string `json:"holderAddress,omitempty"`
	// Successor is, while IsLeader, the candidate this pod would hand the
	// Lease over to if it released now (health gating's candidates: a
	// healthy one of the newest revision); left out when there is none.
	// Its changes do not change Revision.
	Successor string `json:"successor,omitempty"`
	// Revision grows by one on every change of Holder, IsLeader,
	// FencingToken, LeaderSince, HolderAddress or Degraded.
	Revision uint64 `json:"revision"`
	// LastChange is this pod's most recent change of leadership and why;
	// absent before the first.
	LastChange *Change `json:"lastChange,omitempty"`
	// Degraded is true while this pod reports that something is wrong
	// that does not (yet) end its leadership or candidacy; DegradedReason
	// says what.
	Degraded       bool   `json:"degraded"`
	DegradedReason string `json:"degradedReason,omitempty"`
}

// Acquire is the answer of POST /acquire: the state after the attempts,
// and whether this pod leads (false: another holder has the Lease).
type Acquire struct {
	Leader
	Acquired bool `json:"acquired"`
}

// Release is the answer of POST /release: the state after it, and whether
// this pod held the Lease and handed it over (false: it did not lead, and
// nothing was done).
type Release struct {
	Leader
	Released bool `json:"released"`
}

// Lost is the data of the "lost" events of GET /events: this pod stopped
// leading, and why (the onLost of a Lease API). The "leader" event with
// the new state follows it.
type Lost struct {
	// Reason is one of Change's reasons other than acquired.
	Reason string `json:"reason"`
	// At is when the term ended (for renew-deadline, when the claim ran
	// out, which may be well before a paused process noticed).
	At Time `json:"at"`
	// FencingToken is the token of the term that ended.
	FencingToken int64 `json:"fencingToken"`
	// Holder is who holds the Lease now, as this pod sees it; "" if no one.
	Holder string `json:"holder"`
}

// Change is one change of this pod's leadership.
type Change struct {
	// IsLeader is true when this pod became leader, false when it stopped.
	IsLeader bool `json:"isLeader"`
	// Reason is one of ChangeReasons: acquired, released, shutdown,
	// renew-deadline, taken-over, lease-deleted, app-unhealthy,
	// handed-over.
	Reason string `json:"reason"`
	// At is when: for renew-deadline the moment the claim ran out.
	At Time `json:"at"`
	// FencingToken is the token of the term the change is about.
	FencingToken int64 `json:"fencingToken"`
}

// The reasons of a Change (and of the "lost" event of GET /events): a fixed
// vocabulary, which the log line, the Event and the transitions metric of
// every change carry too. An app may switch on them.
const (
	// ChangeAcquired: this pod wrote itself into the Lease as a new term.
	ChangeAcquired = "acquired"
	// ChangeReleased: the leader stepped down on request (POST /release),
	// or partition mode handed the partition over.
	ChangeReleased = "released"
	// ChangeShutdown: the sidecar is stopping (SIGTERM).
	ChangeShutdown = "shutdown"
	// ChangeRenewDeadline: the last successful renewal started a renew
	// deadline ago (the API server did not answer in time, or the process
	// was paused); At is the moment the claim ran out.
	ChangeRenewDeadline = "renew-deadline"
	// ChangeTakenOver: the Lease was seen naming another holder or another
	// term.
	ChangeTakenOver = "taken-over"
	// ChangeLeaseDeleted: the Lease was seen deleted (or not found).
	ChangeLeaseDeleted = "lease-deleted"
	// ChangeAppUnhealthy: the leader stepped down because its app failed
	// its health checks while another candidate was healthy.
	ChangeAppUnhealthy = "app-unhealthy"
	// ChangeHandedOver: the leader, of an older revision, handed over to a
	// ready candidate of the newest revision (a rollout).
	ChangeHandedOver = "handed-over"
)

// ChangeReasons returns every reason of a Change, in the order the docs
// list them (a new slice each time: the vocabulary cannot be changed).
func ChangeReasons() []string {
	return []string{ChangeAcquired, ChangeReleased, ChangeShutdown, ChangeRenewDeadline, ChangeTakenOver, ChangeLeaseDeleted, ChangeAppUnhealthy, ChangeHandedOver}
}

// Partitions is the answer of GET /partitions and POST
// /partitions/<i>/release, and the data of the "partitions" events of GET
// /events in partition mode.
type Partitions struct {
	Lease    Lease  `json:"lease"`
	Identity string `json:"identity"`
	// Partitions is this pod's N (--partitions).
	Partitions int `json:"partitions"`
	// LeaseDurationSeconds is the partition Leases' duration: no claim
	// runs longer ahead than it.
	LeaseDurationSeconds int32 `json:"leaseDurationSeconds"`
	// EffectivePartitions is the N the group works with: the smallest N
	// among the live members, at most Partitions. It differs from
	// Partitions only while a rolling update changes N; partitions at or
	// above it are not taken, and one this pod owns there is draining.
	EffectivePartitions int  `json:"effectivePartitions"`
	Members             int  `json:"members"`
	Member              bool `json:"member"`
	// FairShare is of EffectivePartitions.
	FairShare FairShare `json:"fairShare"`
	// Owned is never null: an empty list when nothing is owned.
	Owned    []OwnedPartition `json:"owned"`
	Revision uint64           `json:"revision"`
	// Degraded is true while health gating (--app-health-url) cannot move
	// partitions away from unhealthy apps because every member's app is
	// unhealthy; DegradedReason says so.
	Degraded       bool   `json:"degraded"`
	DegradedReason string `json:"degradedReason,omitempty"`
}

// FairShare is how many partitions each member should own.
type FairShare struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// OwnedPartition is one partition this pod owns: it may work on it until
// ValidUntil, under FencingToken.
type OwnedPartition struct {
	Partition    int   `json:"partition"`
	FencingToken int64 `json:"fencingToken"`
	Since        Time  `json:"since"`
	ValidUntil   Time  `json:"validUntil"`
	// RenewTime is the partition Lease's renewTime, as this pod last
	// renewed it (ValidUntil − RenewTime is the sidecar's renew deadline).
	RenewTime Time `json:"renewTime,omitzero"`
	// ValidForMs is Leader.ValidForMs for this partition's claim: how many
	// milliseconds of it were left when the sidecar wrote the answer, on
	// its monotonic clock. Only in answers of GET /partitions, not in
	// events and change notifications.
	ValidForMs *int64 `json:"validForMs,omitempty"`
	// Draining is true while the sidecar wants to hand the partition over
	// (this pod owns more than its fair share): finish, checkpoint and POST
	// /partitions/<i>/release before DrainDeadline, when the sidecar
	// releases it anyway. The partition stays owned until then.
	Draining      bool `json:"draining"`
	DrainDeadline Time `json:"drainDeadline,omitzero"`
	// Checkpoint is the last checkpoint stored with the partition, by this
	// pod or by an earlier owner (a smaller FencingToken): resume from it.
	// Absent if none was ever stored.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
}

// Checkpoint is a checkpoint stored with a partition's Lease by PUT
// /partitions/<i>/checkpoint.
type Checkpoint struct {
	// Value is what the owner stored: UTF-8 text, at most
	// MaxCheckpointBytes.
	Value string `json:"value"`
	// Holder and FencingToken name the term that stored it.
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
	// Time is when the storing sidecar took the request (its clock).
	Time Time `json:"time"`
}

// MaxCheckpointBytes is the largest checkpoint value PUT
// /partitions/<i>/checkpoint stores; a larger one is answered 413.
const MaxCheckpointBytes = 1024

// CheckpointStored is the answer of PUT /partitions/<i>/checkpoint: the
// checkpoint as stored, under the fencing token of this pod's term.
type CheckpointStored struct {
	Partition  int        `json:"partition"`
	Checkpoint Checkpoint `json:"checkpoint"`
}

// Reasons of a 409 answer (Error.Reason): of PUT
// /partitions/<i>/checkpoint, and for ReasonTermChanged and
// ReasonTermCurrent of the calls that take ?fencingToken=.
const (
	// ReasonNotOwned: this pod does not own the partition.
	ReasonNotOwned = "not-owned"
	// ReasonClaimExpired: this pod's claim ran out (a paused pod, or one
	// that could not renew); another pod may own the partition now.
	ReasonClaimExpired = "claim-expired"
	// ReasonTermChanged: the Lease is in another term than the one the
	// write named (?fencingToken=), or than the one this pod owned the
	// partition under: a checkpoint or release left over from an earlier
	// term. Nothing was written; the current term goes on.
	ReasonTermChanged = "term-changed"
	// ReasonTermCurrent: POST /acquire?fencingToken=N, and term N has not
	// ended as far as this sidecar knows (it is the Lease's current term,
	// held by this pod or another, or one this sidecar has not seen yet).
	// Nothing was attempted.
	ReasonTermCurrent = "term-current"
	// ReasonConflict: the Lease kept changing under the write.
	ReasonConflict = "conflict"
)

// Time is a moment as the API writes it: RFC 3339 in UTC with microseconds,
// the Lease's own precision. time.Time's own JSON trims trailing zeros and
// keeps nanoseconds, which is not that format; the zero Time is written as
// "" (or left out, with omitzero).
type Time struct{ time.Time }

// TimeFormat is the layout of every time in an answer.
const TimeFormat = "2006-01-02T15:04:05.000000Z07:00"

// MarshalJSON writes t in TimeFormat, or "" if t is zero.
func (t Time) MarshalJSON() ([]byte, error) {
	if t.IsZero() {
		return []byte(`""`), nil
	}
	b := make([]byte, 0, len(TimeFormat)+2)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, TimeFormat)
	return append(b, '"'), nil
}

// UnmarshalJSON reads any RFC 3339 time; "" and null leave t zero.
func (t *Time) UnmarshalJSON(b []byte) error {
	if s, err := strconv.Unquote(string(b)); err == nil && s == "" {
		t.Time = time.Time{}
		return nil
	}
	return t.Time.UnmarshalJSON(b)
}

// Error is the body of every error answer, {"error": "..."}, and the error
// the Client returns for an answer that is not 2xx.
type Error struct {
	// StatusCode is the answer's HTTP status; it is not part of the body.
	StatusCode int `json:"-"`
	// Message is the body's "error".
	Message string `json:"error"`
	// Reason, on some answers, says why in a word (ReasonNotOwned, …).
	Reason string `json:"reason,omitempty"`
	// RetryAfter is the answer's Retry-After header (429); it is not part
	// of the body.
	RetryAfter time.Duration `json:"-"`
}

func (e *Error) Error() string {
	return strconv.Itoa(e.StatusCode) + " " + http.StatusText(e.StatusCode) + ": " + e.Message
}
