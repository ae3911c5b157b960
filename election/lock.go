package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/leader-elector/leader-elector/internal/racebackoff"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leasecache"
)

// errClaimLapsed is returned instead of renewing a claim that has run out.
var errClaimLapsed = errors.New("leadership claim lapsed before renewal; starting a new acquisition")

// errNotAdmitted is returned instead of starting a term the Gate does not
// allow (partition mode: this pod already holds its share).
var errNotAdmitted = errors.New("the gate does not admit a new term on this lease now")

// errNotExpired is returned instead of taking a Lease whose holder may
// still be renewing it.
var errNotExpired = errors.New("the lease holder has renewed within the lease duration; not taking the lease")

// observingLock wraps client-go's LeaseLock. Every record client-go reads or
// writes passes through it, so the tracker learns the holder, the fencing
// token and the start of every successful renewal without a second request.
//
// Reads come from a watch-backed cache (see package leasecache); writes carry the
// resourceVersion that was read.
//
// It also changes what client-go would otherwise do:
//   - Until this process has written the Lease itself, a record that names its
//     own identity belongs to a previous incarnation (a restarted container of
//     the same pod). client-go would silently continue that term; the lock
//     shows it to client-go under another name, so client-go waits for it to
//     expire like any other holder's and then starts a new term with a new
//     fencing token.
//   - A Lease whose holder has not renewed for a whole lease duration, by this
//     pod's exact observation, is shown as free, and no acquisition is sent
//     before that (see Update).
//   - With a Gate, a new term is started only when the gate admits it; while
//     it does not, a free or expired Lease is shown to client-go as held
//     (see Get), so client-go waits quietly instead of failing its writes.
//   - A renewal of a claim that has lapsed (the process was paused past the
//     renew deadline) is refused, and onLapse is called, so that leadership
//     never silently resumes: the elector starts over and a new claim begins.
//   - A Lease without a holder's history (created or replaced as `spec: {}`,
//     or deleted) is shown as held by an unknown holder for a lease duration
//     from when it was first seen so: whoever held the object before may
//     still claim it until its renew deadline.
//   - A new term's fencing token is not client-go's "previous plus one" but
//     newTermToken's, which never goes back across a deletion, replacement
//     or restore of the Lease; a token that would overflow the int32 field is
//     refused.
//   - A missing Lease is created without a holder (it then has no history,
//     as above), unless the Lease is this candidate's own (ownLease).
//
// client-go uses a lock from one goroutine at a time, and so does this.
type observingLock struct {
	inner   *resourcelock.LeaseLock
	tracker *tracker
	metrics *metrics
	onLapse func()
	// onThrottled is told when the API server asked this candidate to wait
	// before its next takeover (see refusedTakeover).
	onThrottled func()
	// gate, if set, admits new terms (not renewals of this process's own);
	// so does campaign (nil: always).
	gate     Gate
	campaign *campaign
	// backoff, if set, delays this candidate's takeovers after races it
	// lost: until its wait has passed, a Lease that may be taken is shown
	// to client-go as held (see Get).
	backoff *racebackoff.Backoff
	// takeoverRank, if set, is Config.TakeoverRank: where it gives this
	// candidate a place, the place's wait replaces the back-off.
	takeoverRank func(holder string, token int64) int
	retryPeriod  time.Duration
	// labels are GroupMember.Labels; dynamic is GroupMember.DynamicLabels,
	// merged over them into inner's labels before every write.
	labels  map[string]string
	dynamic func() map[string]string
	// ownLease: the Lease is named after this candidate and nobody else
	// contends it (a partition membership Lease), so a missing Lease is
	// created already held.
	ownLease bool
	// wroteOnce is set after this process's first successful write.
	wroteOnce bool
	// justTook is set by a successful write that started a new term of this
	// process, cleared by one that renewed it and by the skip it allows:
	// see skipsRenewalAfterTaking. Left set otherwise (a failed write, a
	// release), it is harmless: the skip also needs the term held and its
	// last write less than half a retry period old.
	justTook atomic.Bool
	// ownToken is the fencing token of the last term this process wrote as
	// its own.
	ownToken int64
	// cache serves inner's reads, if the lock reads through one.
	cache *leasecache.Cache
	// writing is held for the whole of every write, so that a round is never
	// cut short while a write is on its way (see Elector.attemptNow), and
	// so that a fenced annotation (Elector.Annotate) and a renewal are never
	// on their way at once.
	writing *sync.Mutex
	// using is held around every use of inner, which keeps the Lease object
	// it last read or wrote and builds its next write on it: client-go uses
	// inner from its elector's goroutine, rebase from another.
	using sync.Mutex
	// readServerClock, if set, makes a request whose answer's Date updates
	// the tracker's ServerClock; logClockUnread is told when it fails.
	readServerClock func() error
	logClockUnread  func(error)
	// onExhausted is told, once, that no new term can start because the
	// token has reached its limit.
	exhaustedOnce sync.Once
	logExhausted  func(error)
}

func (l *observingLock) onExhausted(err error) {
	l.exhaustedOnce.Do(func() {
		if l.logExhausted != nil {
			l.logExhausted(err)
		}
	})
}

var _ resourcelock.Interface = (*observingLock)(nil)

// previousIncarnationSuffix marks, for client-go only, a record that names
// this identity but was written by an earlier process.
const previousIncarnationSuffix = " (previous incarnation)"

// notAdmittedHolder is the holder client-go is shown while the gate does not
// admit a new term on a Lease that is free or expired.
const notAdmittedHolder = "(not admitted by the gate)"

// backingOffHolder is the holder client-go is shown while this candidate
// waits out its back-off after a lost race (racebackoff.Backoff) on a Lease that
// may be taken.
const backingOffHolder = "(backing off after a lost race)"

// deferringHolder is the holder client-go is shown while this candidate
// leaves a released Lease to the successor its leader named (see
// SuccessorAnnotation).
const deferringHolder = "(released to the named successor)"

// unknownHolder is the holder client-go is shown while a Lease without a
// holder's history may still be claimed by whoever held it before.
const unknownHolder = "(unknown holder of a replaced lease)"

// observeRead tells the tracker what Get read — unless, with a watch-backed
// cache, a newer version has already reached the tracker: a read that lost
// that race must not show the tracker (and the app) an older Lease, a
// fencing token going back.
func (l *observingLock) observeRead(rec *resourcelock.LeaderElectionRecord) {
	observe := func() { l.tracker.observeRead(recordOf(rec)) }
	if l.cache == nil {
		observe()
		return
	}
	l.cache.WhileServedCurrent(observe)
}

func (l *observingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.using.Lock()
	rec, raw, err := l.inner.Get(ctx)
	l.using.Unlock()
	if err != nil {
		if apierrors.IsNotFound(err) {
			l.tracker.observeNotFound()
			if !l.admits() {
				return l.show(resourcelock.LeaderElectionRecord{}, notAdmittedHolder)
			}
		}
		return rec, raw, err
	}
	l.observeRead(rec)
	shown := *rec
	holding := l.tracker.holdingLease()
	free := rec.HolderIdentity == "" || (!holding && l.tracker.holderExpired())
	switch {
	case !holding && l.tracker.holderUnknown():
		return l.show(shown, unknownHolder)
	case free && !holding && !l.admits():
		return l.show(shown, notAdmittedHolder)
	case free && !holding && l.tracker.deferring():
		return l.show(shown, deferringHolder)
	case free && !holding && l.backingOff():
		return l.show(shown, backingOffHolder)
	case rec.HolderIdentity != "" && !holding && l.tracker.holderExpired():
		// Expired by this pod's own full-precision observation: shown as
		// free so that client-go tries at once instead of measuring the
		// expiry again from now (it starts its clock at its first read).
		shown.HolderIdentity = ""
	case !l.wroteOnce && rec.HolderIdentity == l.inner.Identity():
		shown.HolderIdentity += previousIncarnationSuffix
	default:
		return rec, raw, nil
	}
	raw, err = json.Marshal(shown)
	if err != nil {
		return nil, nil, fmt.Errorf("encode election record: %w", err)
	}
	return &shown, raw, nil
}

// backingOff reports whether this candidate is still waiting out its
// back-off (racebackoff.Backoff) before it tries a Lease that may be taken; the
// elector's attempt timer starts a new round when the wait ends.
func (l *observingLock) backingOff() bool {
	if l.tracker.clock.Now().Before(l.backoff.ThrottledUntil()) {
		return true
	}
	wait := l.takeoverWait()
	if wait == 0 {
		return false
	}
	at, ok := l.tracker.nextAttempt()
	return ok && l.tracker.clock.Now().Before(at.Add(wait))
}

// takeoverWait is how long this candidate waits, from the moment the
// Lease may be taken, before it tries: nothing if its releasing leader
// named it (no race to stay out of); its place's wait if the candidates
// are ranked (racebackoff.Ranked); else its back-off after races it lost.
func (l *observingLock) takeoverWait() time.Duration {
	if l.tracker.namedSuccessor() {
		return 0
	}
	if l.takeoverRank != nil {
		if holder, token, ok := l.tracker.takeoverSubject(); ok {
			if rank := l.takeoverRank(holder, token); rank >= 0 {
				return racebackoff.Ranked(rank, l.retryPeriod)
			}
		}
	}
	return l.backoff.Wait()
}

// admits reports whether the campaign and the gate, if any, would admit a
// new term now.
func (l *observingLock) admits() bool {
	return l.campaign.Admits() && (l.gate == nil || l.gate.Admits())
}

// show returns r to client-go as held by holder and renewed just now:
// client-go then counts the Lease as valid and does not try it. The renew
// time changes on every read, so client-go never sees it expire; a new
// round is started when the Lease may be taken (the owner of the gate once
// it admits, the elector's attempt timer once an unknown holder's claim has
// certainly ended).
func (l *observingLock) show(r resourcelock.LeaderElectionRecord, holder string) (*resourcelock.LeaderElectionRecord, []byte, error) {
	now := metav1.NewTime(l.tracker.clock.Now())
	r.HolderIdentity = holder
	r.RenewTime = now
	if r.LeaseDurationSeconds == 0 {
		r.LeaseDurationSeconds = 1
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return nil, nil, fmt.Errorf("encode election record: %w", err)
	}
	return &r, raw, nil
}

// admitted runs write if it continues this process's own term, or if the
// gate admits a new term; the admission is held for the whole write, so
// that the gate can count acquisitions on their way.
func (l *observingLock) admitted(newTerm bool, write func() error) error {
	if !newTerm {
		return write()
	}
	campaignDone, ok := l.campaign.Admit()
	if !ok {
		return errNotAdmitted
	}
	defer campaignDone()
	if l.gate == nil {
		return write()
	}
	done, ok := l.gate.Admit()
	if !ok {
		return errNotAdmitted
	}
	defer done()
	return write()
}

func (l *observingLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if !l.ownLease {
		return l.createWithoutHolder(ctx)
	}
	return lostRace(l.admitted(true, func() error {
		if err := l.setNewTermToken(&ler, false); err != nil {
			return err
		}
		return l.write(ctx, ler, l.inner.Create)
	}))
}

// errCreatedWithoutHolder ends the round in which this process created a
// missing Lease without a holder.
var errCreatedWithoutHolder = errors.New("created the missing lease without a holder; it is taken once a lease duration has passed since it was found missing")

// createWithoutHolder creates the missing Lease as `spec: {}`, as kubectl
// would: a Lease that went missing may have had a holder that still claims
// it until its renew deadline, and a new object restarts spec.leaseTransitions,
// so it is taken, like any Lease without history, only after a lease duration
// (counted from when it was found missing) and with a token above the
// seconds to its creation (newTermToken).
func (l *observingLock) createWithoutHolder(ctx context.Context) error {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: l.inner.LeaseMeta.Namespace, Name: l.inner.LeaseMeta.Name, Labels: l.inner.Labels}}
	l.using.Lock()
	leases := l.inner.Client.Leases(lease.Namespace)
	l.using.Unlock()
	if _, err := leases.Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return lostRace(fmt.Errorf("create lease %s/%s: %w", lease.Namespace, lease.Name, err))
	}
	return errCreatedWithoutHolder
}

// readServerClockForHistorylessLease asks the API server for its version
// before this process takes a Lease without a holder's history, if its last
// answer is older than serverclock.StaleAfter: the answer's Date brings the server's
// clock up to date (an idle candidate's view of it comes from an answer that
// may be hours old, less the drift allowance), and the token of the term is
// above it (see newTermToken). A fresh view is not read again: in partition
// mode many Leases are taken at once, through one rate-limited client. /version is readable by every client the API
// server authenticates (the default system:public-info-viewer role), so it
// needs no RBAC of the sidecar's own. If it fails, the clock known so far is
// still a lower bound (see serverclock.Clock), only an older one.
func (l *observingLock) readServerClockForHistorylessLease() {
	if l.readServerClock == nil || l.tracker.holdingLease() || !l.tracker.historylessNow() || !l.tracker.server.Stale() {
		return
	}
	if err := l.readServerClock(); err != nil && l.logClockUnread != nil {
		l.logClockUnread(err)
	}
}

// setNewTermToken gives a new term of this process its fencing token, or
// refuses it (see newTermToken).
func (l *observingLock) setNewTermToken(ler *resourcelock.LeaderElectionRecord, strict bool) error {
	token, err := l.tracker.newTermToken(int64(ler.LeaderTransitions), strict)
	if err != nil {
		if errors.Is(err, errTokenExhausted) {
			l.onExhausted(err)
		}
		return err
	}
	ler.LeaderTransitions = int(token)
	return nil
}

func (l *observingLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == l.inner.Identity() {
		if l.tracker.claimLapsed() {
			if l.onLapse != nil {
				l.onLapse()
			}
			return errClaimLapsed
		}
		// client-go decides that a Lease has expired by comparing records
		// at one-second precision; renewals within one second look
		// unchanged to it. This pod's own observation is exact, and no
		// acquisition goes out that it does not allow.
		if !l.tracker.mayAcquire() {
			return errNotExpired
		}
		l.readServerClockForHistorylessLease()
		newTerm := !l.tracker.holdingLease()
		if !newTerm && l.skipsRenewalAfterTaking() {
			return nil
		}
		err := l.admitted(newTerm, func() error {
			// client-go carries its own idea of the token: what it proposed
			// for the term, not what was written. A renewal of the term this
			// process holds keeps that term's token; any other write starts
			// a new term with newTermToken's, also one that takes back this
			// process's own term after its claim ended: routing withdrawn
			// under a token is published again only under a larger one (the
			// admission policies require it).
			if token, ok := l.tracker.currentOwnTerm(); ok && !newTerm {
				ler.LeaderTransitions = int(token)
			} else if err := l.setNewTermToken(&ler, !l.ownLease); err != nil {
				return err
			}
			if newTerm {
				return l.write(leasecache.SendOnce(ctx), ler, l.inner.Update)
			}
			return l.write(ctx, ler, l.inner.Update)
		})
		if newTerm && err != nil {
			l.refusedTakeover(err)
			return lostRace(err)
		}
		return err
	}
	return l.write(ctx, ler, l.inner.Update)
}

// errLostRace marks a write for a new term that the API server refused
// because the Lease had changed since it was read (409 Conflict), or, for
// a missing Lease, because another candidate had created it first (409
// AlreadyExists): a race to take the Lease, lost. In a group of candidates
// that is the expected outcome for all but one of them at every change of
// leader, so it is not logged as an error (see quietExpected). A conflict
// on a renewal of this pod's own term is not marked: something else wrote
// the Lease while this pod held it.
var errLostRace = errors.New("another write changed the lease first: a race to take it, lost")

// lostRace marks err with errLostRace if it is a 409; the API error stays
// in the chain, for apierrors' checks.
func lostRace(err error) error {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%w: %w", errLostRace, err)
	}
	return err
}

// refusedTakeover deals with a takeover write the API server refused with
// a Retry-After (429 from priority and fairness when a herd of candidates
// writes at once, or a 5xx): the write was sent once (see sendOnce), so
// this candidate decides itself when to try again. A 429 is a race lost,
// like a conflict, and one that says the group is large: the next race's
// delay is drawn from the largest window at once
// (racebackoff.Backoff.LostOverloaded), so that it is not a herd again. It is
// counted even if the watch showed the winner first and that version
// counted the loss: the 429 is news. A 5xx is not counted: it says nothing
// about other candidates, and counting it would slow the takeover after an
// API server recovers. Either way no takeover is tried before the
// Retry-After has passed, and onThrottled schedules one for then, since
// client-go would otherwise wait for its next retry tick. Called outside
// the write lock: onThrottled takes the elector's.
func (l *observingLock) refusedTakeover(err error) {
	seconds, ok := apierrors.SuggestsClientDelay(err)
	if !ok || seconds <= 0 {
		return
	}
	if apierrors.IsTooManyRequests(err) {
		l.backoff.LostOverloaded()
	}
	l.backoff.Throttled(time.Duration(seconds) * time.Second)
	if l.onThrottled != nil {
		l.onThrottled()
	}
}

func (l *observingLock) write(ctx context.Context, ler resourcelock.LeaderElectionRecord, do func(context.Context, resourcelock.LeaderElectionRecord) error) error {
	// The claim is measured from before the request is sent: the API server
	// may apply the write at any moment until the answer arrives, and other
	// candidates start their lease-duration wait no earlier than that.
	l.writing.Lock()
	defer l.writing.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	// Once sent, a write is seen through even if the round is cancelled:
	// the API server may apply it whether or not the answer is awaited, and
	// a write applied but not recorded would leave the Lease naming this pod
	// while it does not know it leads (the client's request timeout still
	// bounds it).
	ctx = context.WithoutCancel(ctx)
	start := l.tracker.clock.Now()
	l.using.Lock()
	if l.dynamic != nil {
		// A fresh map each time: client-go reads it while it writes.
		labels := maps.Clone(l.labels)
		if labels == nil {
			labels = map[string]string{}
		}
		maps.Copy(labels, l.dynamic())
		l.inner.Labels = labels
	}
	err := do(ctx, ler)
	l.using.Unlock()
	if err != nil {
		return err
	}
	l.metrics.observeRenewal(l.tracker.clock.Since(start))
	l.wroteOnce = true
	if ler.HolderIdentity == l.inner.Identity() {
		l.justTook.Store(!l.tracker.holdingLease())
		l.ownToken = int64(ler.LeaderTransitions)
		l.tracker.observeWrite(start, recordOf(&ler))
		l.backoff.Won()
	}
	return nil
}

// skipsRenewalAfterTaking answers client-go's renewal that follows a new
// term at once, without a write. client-go's renew loop polls immediately,
// so every acquisition is followed, a millisecond later, by a second write
// that carries nothing new: one write in four of a graceful handover with a
// named successor, one in two of a crash takeover, one per partition taken.
// It is skipped only if it comes within half a retry period of the
// acquisition's start and the Lease's labels would not change; after a
// slower acquisition it is sent, as before.
//
// Safe, because the claim this process acts on (isLeader, validUntil, the
// lapse check and so the watchdog) is measured from the start of the writes
// it sent (tracker.observeWrite): a skipped renewal extends nothing (the
// claim runs from the acquisition, a few milliseconds earlier than from the
// renewal), and the next renewal comes a retry period later, well inside
// that claim (the renew deadline exceeds the retry period). client-go takes
// the skip for a renewal: its observedTime moves by those milliseconds,
// and this process's claim ends first in any case. What is lost: a Lease
// deleted or edited in that moment is noticed at the next renewal, a retry
// period later, not by the skipped write's failure.
func (l *observingLock) skipsRenewalAfterTaking() bool {
	if !l.justTook.Swap(false) {
		return false
	}
	since, ok := l.tracker.sinceOwnWrite()
	if !ok || since >= l.retryPeriod/2 {
		return false
	}
	if l.dynamic == nil {
		return true
	}
	l.using.Lock()
	defer l.using.Unlock()
	for k, v := range l.dynamic() {
		if l.inner.Labels[k] != v {
			return false
		}
	}
	return true
}

// RecordEvent records client-go's "became leader" and "stopped leading" on
// the Lease, with the reason (a Reason) and the fencing token of the term
// they are about: the last one this process wrote. client-go records them
// only after a successful write of this process's own term, which is also
// what gives the inner lock the Lease object (and its UID) that the Event
// refers to.
//
// client-go records "stopped leading" when its renewal loop ends, just
// before it calls OnStoppedLeading: the term is marked ended here, so that
// the Event says why.
func (l *observingLock) RecordEvent(s string) {
	if !l.wroteOnce {
		return
	}
	reason := leadership.ReasonAcquired
	if s == clientGoStoppedLeading {
		reason = l.tracker.stoppedLeading()
	}
	l.using.Lock()
	defer l.using.Unlock()
	l.inner.RecordEvent(fmt.Sprintf("%s (reason %s, fencing token %d)", s, reason, l.ownToken))
}

// RecordHandover records, after a release that named a successor, who it
// is: client-go's "stopped leading" is recorded when the renewal loop ends,
// before the release picks the successor, so that Event cannot say.
func (l *observingLock) RecordHandover(token int64, successor string) {
	if !l.wroteOnce {
		return
	}
	l.using.Lock()
	defer l.using.Unlock()
	l.inner.RecordEvent(fmt.Sprintf("handed over to %s, the successor it named (fencing token %d)", successor, token))
}

// rebase makes lease, which this process has just written itself (a fenced
// annotation, see Elector.Annotate), the object client-go's LeaseLock
// builds its next write on. LeaseLock keeps the object it last read or
// wrote and sends its next renewal as an update of it, conditional on its
// resourceVersion: after a write of ours that it did not make, that
// renewal would fail with a conflict (client-go then falls back to a read
// and a second write: two more requests and a slower renewal every time).
// LeaseLock has no setter; its Get is the one way to hand it an object, so
// Get is pointed at lease for one call. Exactly lease, not the cache's
// latest: a newer version may be another holder's, and client-go's fast
// path renews whatever it holds without looking at it again.
func (l *observingLock) rebase(ctx context.Context, lease *coordinationv1.Lease) {
	l.using.Lock()
	defer l.using.Unlock()
	client := l.inner.Client
	defer func() { l.inner.Client = client }()
	l.inner.Client = pinnedLease{lease: lease}
	// pinnedLease's Get cannot fail, nor can encoding the record it holds.
	_, _, _ = l.inner.Get(ctx)
}

// pinnedLease answers Get with one Lease object; nothing else is called on
// it (see rebase).
type pinnedLease struct {
	coordinationv1client.LeaseInterface
	lease *coordinationv1.Lease
}

func (p pinnedLease) Leases(string) coordinationv1client.LeaseInterface { return p }

func (p pinnedLease) Get(context.Context, string, metav1.GetOptions) (*coordinationv1.Lease, error) {
	return p.lease.DeepCopy(), nil
}

// clientGoStoppedLeading is what client-go's elector records when its
// renewal loop ends ("became leader" when it acquires).
const clientGoStoppedLeading = "stopped leading"

func (l *observingLock) Identity() string { return l.inner.Identity() }
func (l *observingLock) Describe() string { return l.inner.Describe() }

func recordOf(r *resourcelock.LeaderElectionRecord) record {
	return record{
		holder:          r.HolderIdentity,
		transitions:     int64(r.LeaderTransitions),
		durationSeconds: int32(r.LeaseDurationSeconds),
		// The Lease stores microseconds; keep what a reader would see.
		renewTime: r.RenewTime.Time.Truncate(time.Microsecond),
	}
}
