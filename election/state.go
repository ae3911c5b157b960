package election

import (
	"github.com/leader-elector/leader-elector/holderaddress"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/serverclock"
)

// record is the part of a Lease the tracker needs.
type record struct {
	holder          string
	transitions     int64
	durationSeconds int32
	renewTime       time.Time
}

// historyless reports whether r carries nothing of a holder's history: no
// holder and no renewTime — a Lease created or replaced as `spec: {}` by
// kubectl, Helm or GitOps, or one that does not exist. Whoever held the
// Lease before it was deleted or replaced is unknown, and may still claim
// it until its renew deadline, so it is not free (see mayAcquire).
func (r record) historyless() bool {
	return r.holder == "" && r.renewTime.IsZero()
}

// view is the part of State whose changes bump the revision.
type view struct {
	holder      string
	isLeader    bool
	token       int64
	leaderSince time.Time
	degraded    string
	address     string
}

// tracker owns the election state. The lock wrapper feeds it what it reads
// and writes; the HTTP API and the metrics read it. Everything derived from
// time (leadership validity, holder expiry) is computed when read, so a
// process that was frozen reports the truth on its first read after resuming,
// before any goroutine of its own has had a chance to run; a timer publishes
// the same transitions for watchers.
type tracker struct {
	clock         clock.WithDelayedExecution
	namespace     string
	name          string
	identity      string
	renewDeadline time.Duration
	// leaseDuration is how long a Lease without a holder's history is
	// treated as held by an unknown holder after it is first seen so.
	leaseDuration time.Duration

	mu sync.Mutex

	// highest is the highest fencing token this process has seen on the
	// Lease or written to it. The token published never goes below it and
	// a new term written by this process goes above it, whatever happens
	// to the Lease object (deletion, replacement, an etcd restore).
	highest int64
	// created is the creationTimestamp of the Lease object last seen (zero
	// if unknown); server is what this process knows of the API server's
	// clock. Together they make the token durable across a re-creation of
	// the Lease while no sidecar runs (see newTermToken).
	created time.Time
	server  *serverclock.Clock
	// historylessFloor is the server's clock (see serverclock.Clock) when the
	// Lease was first seen without a holder's history, 0 if unknown.
	historylessFloor int64
	// warnAhead, if set, is told (once) that a token is too far ahead of
	// the server's clock to wait for it (see newTermToken).
	warnAhead func(token, clock int64)

	observed     record
	haveObserved bool
	// addresses are the holder addresses of the last two terms that
	// published one (address.go).
	addresses [2]holderaddress.Value
	// observedAt is when the observed record last changed, on the local
	// monotonic clock; the holder is reported as gone a lease duration later.
	observedAt time.Time
	reachedAPI bool
	// terms counts the Lease terms observed (a new holder or a new token).
	terms uint64

	// holding: our last write to the Lease succeeded and nothing read since
	// shows that someone else has taken it.
	holding bool
	// claiming is false while shutting down and while sitting out after a
	// release: no write, however successful, makes this pod the leader then.
	claiming bool
	// renewStart is when our last successful write was sent (monotonic).
	renewStart time.Time
	// lastRenew is when our last successful write returned (wall clock).
	lastRenew time.Time
	// ownToken is the fencing token of the last term this process wrote
	// itself into; hasOwnTerm says whether there is one.
	ownToken   int64
	hasOwnTerm bool
	// leaderSince is when the current claim began.
	leaderSince time.Time

	// onChange, if set, is called after every change of the revision, under
	// mu; it must not block.
	onChange func()
	// onState, if set, is given every new state, under mu; it must not
	// block.
	onState func(leadership.State)
	// degraded is what setDegraded last set.
	degraded string

	// successor is the candidate named on the Lease version last taken in
	// (SuccessorAnnotation), "" for none; successorWait is how long every
	// other candidate leaves a released Lease to it (one retry period).
	successor     string
	successorWait time.Duration

	// stopCause is why this pod stops leading, set by the method that
	// makes it stop (while it still led) just before it publishes; empty
	// when the claim ran out by time.
	stopCause leadership.Reason
	// changes are the leadership changes not yet taken by takeChanges
	// (the log), at most maxPendingChanges; lastChange is the latest.
	changes    []leadership.Change
	lastChange leadership.Change
	lastLost   leadership.Change
	// onTransition, if set, is told every change of leadership as it is
	// recorded (the metrics by reason), under mu; it must not block.
	onTransition func(leadership.Change)

	published view
	revision  uint64
	changed   chan struct{}
	timer     clock.Timer
	// timerAt is when timer fires; a read that computes the same moment
	// leaves the timer alone, so reads do not churn timers.
	timerAt time.Time
}

// maxPendingChanges bounds the leadership changes kept for the log line
// writer; it takes them within moments, so only a stalled writer loses any.
const maxPendingChanges = 64

func newTracker(clk clock.WithDelayedExecution, namespace, name, identity string, renewDeadline, leaseDuration time.Duration) *tracker {
	return &tracker{
		server:        serverclock.New(clk),
		clock:         clk,
		namespace:     namespace,
		name:          name,
		identity:      identity,
		renewDeadline: renewDeadline,
		leaseDuration: leaseDuration,
		claiming:      true,
		changed:       make(chan struct{}),
		revision:      revisionBase(),
	}
}

// revisionBase is where a process's revisions start: the wall clock in
// microseconds, so that they do not repeat those of an earlier process
// (no process changes its state more than once a microsecond) and stay
// below 2^53, where JSON numbers are exact in every language.
func revisionBase() uint64 {
	return uint64(max(time.Now().UnixMicro(), 0))
}

// Snapshot returns the current state.
func (t *tracker) Snapshot() leadership.State {
	s, _ := t.Watch()
	return s
}

// Watch returns the current state and a channel that is closed at the next
// change of its revision.
func (t *tracker) Watch() (leadership.State, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.publishLocked(now)
	return t.stateLocked(now), t.changed
}

// isLeaderLocked is the time bound on leadership: holding the Lease is not
// enough, the last renewal must have started less than renewDeadline ago.
// Other candidates wait a whole lease duration (> renewDeadline) after they
// last saw the Lease change, so this pod stops claiming before anyone else can
// start.
func (t *tracker) isLeaderLocked(now time.Time) bool {
	return t.holding && t.claiming && now.Sub(t.renewStart) < t.renewDeadline
}

func (t *tracker) holderLocked(now time.Time) string {
	if t.isLeaderLocked(now) {
		return t.identity
	}
	if !t.haveObserved || t.observed.holder == "" {
		return ""
	}
	if now.Sub(t.observedAt) >= t.observedDurationLocked() {
		return ""
	}
	return t.observed.holder
}

func (t *tracker) observedDurationLocked() time.Duration {
	return time.Duration(t.observed.durationSeconds) * time.Second
}

func (t *tracker) viewLocked(now time.Time) view {
	v := view{holder: t.holderLocked(now), token: t.highest, degraded: t.degraded}
	v.address = t.addressLocked(v.holder, v.token)
	if t.isLeaderLocked(now) {
		v.isLeader = true
		v.leaderSince = t.leaderSince
	}
	return v
}

func (t *tracker) stateLocked(now time.Time) leadership.State {
	v := t.viewLocked(now)
	s := leadership.State{
		Namespace:            t.namespace,
		Name:                 t.name,
		Identity:             t.identity,
		Holder:               v.holder,
		IsLeader:             v.isLeader,
		FencingToken:         v.token,
		HolderAddress:        v.address,
		LeaseDurationSeconds: t.observed.durationSeconds,
		RenewTime:            t.observed.renewTime,
		Revision:             t.revision,
		LastChange:           t.lastChange,
		LastLost:             t.lastLost,
		Degraded:             v.degraded,
	}
	if v.isLeader {
		s.LeaderSince = t.leaderSince
		s.Deadline = t.renewStart.Add(t.renewDeadline)
		s.ValidUntil = s.Deadline.Round(0)
	}
	return s
}

// publishLocked bumps the revision and wakes watchers if the view changed,
// and arms the timer for the next moment the view changes by itself.
func (t *tracker) publishLocked(now time.Time) {
	v := t.viewLocked(now)
	cause := t.stopCause
	t.stopCause = ""
	if v != t.published {
		if v.isLeader != t.published.isLeader {
			t.recordChangeLocked(now, v, cause)
		}
		t.published = v
		t.revision++
		close(t.changed)
		t.changed = make(chan struct{})
		if t.onChange != nil {
			t.onChange()
		}
		if t.onState != nil {
			t.onState(t.stateLocked(now))
		}
	}
	t.armTimerLocked(now, v)
}

// recordChangeLocked records a change of leadership to the published view
// v, for cause (empty: the claim ran out by time).
func (t *tracker) recordChangeLocked(now time.Time, v view, cause leadership.Reason) {
	c := leadership.Change{Leader: v.isLeader, Reason: leadership.ReasonAcquired, At: now.Round(0), FencingToken: v.token}
	if !v.isLeader {
		c.FencingToken = t.published.token
		c.Reason = cause
		if cause == "" {
			c.Reason = leadership.ReasonRenewDeadline
			// The claim ran out at its deadline, which may be well before
			// this (a paused process learns it when it resumes).
			if deadline := t.renewStart.Add(t.renewDeadline); deadline.Before(now) {
				c.At = deadline.Round(0)
			}
		}
	}
	t.lastChange = c
	if !c.Leader {
		t.lastLost = c
	}
	if t.onTransition != nil {
		t.onTransition(c)
	}
	if len(t.changes) < maxPendingChanges {
		t.changes = append(t.changes, c)
	}
}

// takeChanges returns the leadership changes since the last call, oldest
// first.
func (t *tracker) takeChanges() []leadership.Change {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.publishLocked(t.clock.Now())
	c := t.changes
	t.changes = nil
	return c
}

// stopCauseLocked sets why this pod stops leading if it leads now: call it
// before a change that ends the claim, and publish after.
func (t *tracker) stopCauseLocked(now time.Time, cause leadership.Reason) {
	if t.isLeaderLocked(now) {
		t.stopCause = cause
	}
}

func (t *tracker) armTimerLocked(now time.Time, v view) {
	var next time.Time
	switch {
	case v.isLeader:
		next = t.renewStart.Add(t.renewDeadline)
	case v.holder != "":
		next = t.observedAt.Add(t.observedDurationLocked())
	}
	if t.timer != nil && next.Equal(t.timerAt) {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	t.timerAt = next
	if next.IsZero() {
		return
	}
	// A millisecond late so that the view has certainly changed when it fires.
	t.timer = t.clock.AfterFunc(next.Sub(now)+time.Millisecond, t.refresh)
}

func (t *tracker) refresh() {
	t.mu.Lock()
	defer t.mu.Unlock()
	// This timer has fired: the next one must be armed even for the same
	// moment (a clock that fires early must not leave watchers unwoken).
	t.timer = nil
	t.publishLocked(t.clock.Now())
}

// observeRead records a Lease record read from the API server.
func (t *tracker) observeRead(r record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.reachedAPI = true
	t.observeLocked(now, r)
	if r.holder != t.identity || !t.hasOwnTerm || r.transitions != t.ownToken {
		// Someone else holds the Lease (or a term that is not ours).
		t.stopCauseLocked(now, leadership.ReasonTakenOver)
		t.holding = false
	}
	t.publishLocked(now)
}

// observeNotFound records that the API server answered that the Lease does
// not exist: a Lease without history, from now if it was not already.
func (t *tracker) observeNotFound() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reachedAPI = true
	t.observeAbsentLocked()
}

// observeDeleted records that the Lease was deleted: no one is known to
// hold it, and whoever did may still claim it until its renew deadline.
func (t *tracker) observeDeleted() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observeAbsentLocked()
}

func (t *tracker) observeAbsentLocked() {
	now := t.clock.Now()
	t.stopCauseLocked(now, leadership.ReasonLeaseDeleted)
	// The token of the last record seen is kept, so that an absent Lease
	// reads the same on every NotFound and its wait is not restarted.
	t.observeLocked(now, record{transitions: t.observed.transitions})
	t.created = time.Time{}
	t.successor = ""
	t.holding = false
	t.publishLocked(now)
}

// holderExpired reports whether the observed holder has not renewed for its
// whole lease duration, measured on this pod's monotonic clock from when it
// last saw the record change: client-go's rule for taking over a Lease, at
// full precision (client-go compares records at one-second precision).
func (t *tracker) holderExpired() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holderExpiredLocked(t.clock.Now())
}

func (t *tracker) holderExpiredLocked(now time.Time) bool {
	return t.haveObserved && t.observed.holder != "" && now.Sub(t.observedAt) >= t.observedDurationLocked()
}

// mayAcquire reports whether this pod may write itself into the Lease now
// as a new holder: the Lease is free, expired, or still holds this
// process's own term (nobody else wrote it since). The write itself is
// conditional on the resourceVersion that was read, so if the Lease changed
// after it was observed the write fails.
func (t *tracker) mayAcquire() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if t.holding || !t.haveObserved {
		return true
	}
	if t.observed.historyless() {
		return now.Sub(t.observedAt) >= t.leaseDuration
	}
	if t.observed.holder == "" {
		return !t.deferringLocked(now)
	}
	if t.ownTermCurrentLocked() {
		return true
	}
	return t.holderExpiredLocked(now)
}

// contended reports whether the Lease, as last observed, is held by a live
// holder other than this process's own term, or may still be by the unknown
// holder of a Lease without history: an attempt to take it now would fail.
func (t *tracker) contended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.contendedLocked(t.clock.Now())
}

func (t *tracker) contendedLocked(now time.Time) bool {
	if !t.haveObserved || t.holding {
		return false
	}
	if t.observed.historyless() {
		return now.Sub(t.observedAt) < t.leaseDuration
	}
	if t.observed.holder == "" || t.ownTermCurrentLocked() {
		return false
	}
	return !t.holderExpiredLocked(now)
}

// takeable reports whether this candidate, as it last observed the Lease,
// would take it now or once its back-off ends: it has seen the Lease, does
// not hold it, claims, and no live holder (known or unknown) has it. A
// takeable Lease then seen held by another is a race lost (racebackoff.Backoff).
func (t *tracker) takeable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	return t.haveObserved && !t.holding && t.claiming && !t.contendedLocked(now) && !t.deferringLocked(now)
}

// holderUnknown reports whether the Lease, as last observed, has no holder's
// history (see record.historyless) and is still within the lease duration
// during which it counts as held by an unknown holder.
func (t *tracker) holderUnknown() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.haveObserved && t.observed.historyless() && t.clock.Since(t.observedAt) < t.leaseDuration
}

// historylessNow reports whether the Lease, as last observed, has no
// holder's history.
func (t *tracker) historylessNow() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.haveObserved && t.observed.historyless()
}

// sinceOwnWrite is how long ago this process's last successful write of
// its own term was sent; ok false while it holds no term.
func (t *tracker) sinceOwnWrite() (d time.Duration, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.holding {
		return 0, false
	}
	return t.clock.Now().Sub(t.renewStart), true
}

// holdingLease reports whether this pod's last write holds the Lease.
func (t *tracker) holdingLease() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holding
}

// takeoverSubject is the term a takeover of the Lease as last observed
// follows: its holder ("" once released) and fencing token; ok false
// while this candidate holds it or has not observed it, or the Lease has
// no holder's history (no term ended).
func (t *tracker) takeoverSubject() (holder string, token int64, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holding || !t.haveObserved || t.observed.historyless() {
		return "", 0, false
	}
	return t.observed.holder, t.observed.transitions, true
}

// nextAttempt returns when this candidate may next try to take the Lease:
// when it was seen released if no one holds it (that is, at once), at the
// moment the holder's lease runs out otherwise. The moment stays the same
// while the Lease does, so that a back-off added to it (racebackoff.Backoff) is not
// pushed back by every look at the Lease. ok is false while this pod holds the Lease, is not
// claiming, or has not seen the Lease yet.
func (t *tracker) nextAttempt() (at time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holding || !t.claiming || !t.haveObserved {
		return time.Time{}, false
	}
	if t.observed.historyless() {
		return t.observedAt.Add(t.leaseDuration), true
	}
	if t.observed.holder == "" {
		if t.deferringLocked(t.clock.Now()) {
			return t.observedAt.Add(t.successorWait), true
		}
		return t.observedAt, true
	}
	return t.observedAt.Add(t.observedDurationLocked()), true
}

func (t *tracker) observeLocked(now time.Time, r record) {
	if t.haveObserved && r == t.observed {
		return
	}
	if r.holder != "" && (!t.haveObserved || r.holder != t.observed.holder || r.transitions != t.observed.transitions) {
		t.terms++
	}
	stillHistoryless := t.haveObserved && t.observed.historyless() && r.historyless()
	t.observed = r
	t.haveObserved = true
	t.highest = max(t.highest, r.transitions)
	if stillHistoryless {
		// Still without history (found missing, then created empty): the
		// wait for an unknown holder runs from when it was first seen so.
		return
	}
	t.observedAt = now
	if bound, known := t.server.Bound(); r.historyless() && known {
		t.historylessFloor = bound
	}
}

// claimLapsed reports whether this pod holds the Lease but its claim has run
// out (it could not renew within the renew deadline, or it was paused).
// Renewing a lapsed claim would make a pod leader again without a new
// acquisition; the elector starts over instead.
func (t *tracker) claimLapsed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holding && t.clock.Now().Sub(t.renewStart) >= t.renewDeadline
}

// observeWrite records that our write of r, sent at start, succeeded.
func (t *tracker) observeWrite(start time.Time, r record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.reachedAPI = true
	wasLeader := t.isLeaderLocked(now)
	t.observeLocked(now, r)
	if !wasLeader && t.hasOwnTerm && r.transitions == t.ownToken {
		// A renewal whose claim ran out (or whose round stopped) while it
		// was on its way: that claim has ended, and the router may have
		// withdrawn it under this token. It is not resumed; the next write
		// takes the Lease back as a new term, with a larger token, so that
		// routing never returns under the token it was withdrawn under.
		t.holding = false
		t.publishLocked(now)
		return
	}
	t.holding = true
	t.renewStart = start
	t.lastRenew = now
	t.ownToken = r.transitions
	t.hasOwnTerm = true
	if !wasLeader && t.isLeaderLocked(now) {
		t.leaderSince = now
	}
	t.publishLocked(now)
}

// observeRelease records that we cleared the Lease's holder.
func (t *tracker) observeRelease(r record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.observeLocked(now, r)
	t.holding = false
	t.hasOwnTerm = false
	t.publishLocked(now)
}

// stoppedLeading records that client-go's elector gave up the Lease, and
// returns why this pod's last term ended. client-go gives up only after
// the claim's renew deadline has passed, or after its round was stopped
// for a reason already recorded; still leading, it ran out of time.
func (t *tracker) stoppedLeading() leadership.Reason {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.stopCauseLocked(now, leadership.ReasonRenewDeadline)
	t.holding = false
	t.publishLocked(now)
	if t.lastChange.Leader || t.lastChange.Reason == "" {
		// No term of this pod was published as ended (nor begun): its
		// claim lapsed before it could be.
		return leadership.ReasonRenewDeadline
	}
	return t.lastChange.Reason
}

// setClaiming turns claims on, or off for reason (released, shutdown).
// Turned off, this pod stops reporting leadership at once, whatever the
// state of the Lease.
func (t *tracker) setClaiming(on bool, reason leadership.Reason) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if !on {
		t.stopCauseLocked(now, reason)
	}
	t.claiming = on
	t.publishLocked(now)
}

// setDegraded sets why this pod is degraded ("" when it is not).
func (t *tracker) setDegraded(reason string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.degraded = reason
	t.publishLocked(t.clock.Now())
}

// ownTerm returns the fencing token of the term this process last wrote
// itself into, if any.
func (t *tracker) ownTerm() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownToken, t.hasOwnTerm
}

// ReachedAPI reports whether the API server has answered a Lease request.
func (t *tracker) ReachedAPI() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reachedAPI
}

// lastRenewTime returns the wall time of our last successful write.
func (t *tracker) lastRenewTime() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastRenew
}

// termsObserved returns how many Lease terms this pod has observed.
func (t *tracker) termsObserved() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.terms
}

// stop releases the timer.
func (t *tracker) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
}
