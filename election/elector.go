// Package election runs client-go's leader election on a coordination.k8s.io/v1
// Lease and keeps the resulting state: who holds the Lease, whether this pod
// leads (time-bounded), the fencing token and a revision that watchers can wait
// on. Its clients touch the Lease only (and, through the recorder of package
// leaseevents, the Lease's Events); routing writes go through package
// routing's own client.
package election

import (
	"context"
	"errors"
	"fmt"
	"github.com/leader-elector/leader-elector/holderaddress"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/internal/racebackoff"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leasecache"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/serverclock"
)

// releaseTimeout bounds the write that clears the Lease on shutdown or on
// request. If the API server does not answer in time, the Lease expires on
// its own after the lease duration.
const releaseTimeout = 2 * time.Second

// healthzGrace is how long past the lease duration a leader may go without
// renewing before /healthz fails (client-go's HealthzAdaptor timeout).
const healthzGrace = 20 * time.Second

// LeaseSpec is the Lease a pod takes part in and how: what an elector's
// Config and a partition member's (package partition) share, filled once
// from the sidecar's options.
type LeaseSpec struct {
	// Namespace and Name identify the Lease (in partition mode, the
	// group: its Leases are named after it).
	Namespace, Name string
	// Identity is this candidate's holder identity; it must be unique among
	// the candidates (the pod name).
	Identity string
	// Timings are the lease duration, renew deadline and retry period.
	// LeaseDuration is how long non-leaders wait, after they last saw the
	// Lease change, before they try to take it (a whole number of seconds:
	// the Lease stores seconds). RenewDeadline is how long the leader keeps
	// retrying a renewal before it gives up, and how long after the start
	// of its last successful renewal it still claims leadership; the
	// difference is the margin for clock-rate drift and scheduling delay.
	// RetryPeriod is how often candidates and the leader try the Lease.
	//
	// The sidecar's defaults are 15s, 10s and 2s (package options); the
	// rules of the three are leasetimings.Timings.Check.
	leasetimings.Timings
	// ReleaseOnShutdown clears the Lease's holder when Run's context ends, so
	// that a standby takes over at once instead of after the lease duration.
	ReleaseOnShutdown bool
}

// Validate checks that the Lease and the identity are given, and the
// timings' rules (leasetimings.Timings.Check).
func (s LeaseSpec) Validate() error {
	var errs []error
	if s.Namespace == "" || s.Name == "" {
		errs = append(errs, errors.New("lease namespace and name must be set"))
	}
	if s.Identity == "" {
		errs = append(errs, errors.New("identity must not be empty"))
	}
	errs = append(errs, s.Check(leasetimings.ConfigTimingNames)...)
	return errors.Join(errs...)
}

// Config configures an Elector.
type Config struct {
	// LeaseSpec is the Lease, this candidate's identity on it, the timings
	// and whether to release it on shutdown.
	LeaseSpec
	// Client sends the Lease requests; build it with NewClientsets.
	Client kubernetes.Interface
	// WatchClient watches the Lease; it must not have a request timeout
	// (a watch is one long request). Nil means Client.
	WatchClient kubernetes.Interface
	// Group is set for a Lease of a group (partition mode); the zero
	// value is plain leader election on a Lease of its own.
	Group GroupMember
	// Campaign says when this pod tries to take the Lease: always (auto,
	// the default), only when asked with Acquire (manual), or never (an
	// observer, which never writes the Lease).
	Campaign Campaign
	// Gate, if set, is asked before this pod starts a new term on the Lease
	// (renewals of its own term are not asked). Nil admits every term, as in
	// plain leader election.
	Gate Gate
	// Events, if set, records "became leader" and "stopped leading" as
	// Kubernetes Events on the Lease (see package leaseevents).
	Events resourcelock.EventRecorder
	// OnChange, if set, is called after every change of the state's
	// revision. It must not block: it runs under the state's lock.
	OnChange func()
	// OnState, if set, is given every new state (every revision), in
	// order, as it is published: unlike Watch, which shows the current
	// state, it misses none that was overtaken within microseconds. It
	// must not block: it runs under the state's lock.
	OnState func(leadership.State)
	// ServerClock learns the API server's clock from its answers; pass the
	// one given to NewClientsets. Nil means one of the elector's own, which
	// learns only from the Lease's metadata.
	ServerClock *serverclock.Clock
	// AdvertiseAddress, if set, is the host:port this pod publishes on the
	// Lease with every term it holds (holderaddress.Annotation), for followers to
	// forward requests to (State.HolderAddress); see holderaddress.Check.
	AdvertiseAddress string
	// AllowLoopbackAddress lets this pod advertise, and show as
	// State.HolderAddress, a loopback address: for a sidecar that runs
	// outside a pod (tests, local runs), where candidates share one host.
	// In a pod it must be false: a follower that forwards to a loopback
	// address sends the requests to itself. Link-local addresses are
	// refused either way (holderaddress.Check).
	AllowLoopbackAddress bool
	// Successor, if set, names the candidate a graceful release hands the
	// Lease over to (SuccessorAnnotation), written in the release's own
	// conditional write. Nil names none: the release is a race.
	Successor SuccessorPicker
	// TakeoverRank, if set, is this candidate's place (0 first) in the
	// order in which the candidates try a Lease that may be taken and that
	// no successor was named for, or whose named successor did not take
	// it in time: its holder's claim ran out (a crash), or its release
	// named none. It is given the holder ("" once released) and the
	// fencing token of the term that ended, and must give every candidate
	// the same order from the same knowledge; -1 for no place. A
	// candidate with a place waits racebackoff.Ranked for it instead of
	// its back-off after lost races: one writes first, no herd.
	TakeoverRank func(holder string, token int64) int
	// Clock is for tests; nil means the real clock. Its AfterFunc must run
	// the function on a goroutine of its own, as the real clock does
	// (k8s.io/utils' FakeClock runs it while holding its own lock).
	Clock clock.WithDelayedExecution
}

// GroupMember configures an elector whose Lease is one of a group's: a
// partition Lease or a pod's membership Lease (package partition).
type GroupMember struct {
	// Feed, if set, feeds this elector's Lease from the group's one watch
	// instead of a watch of its own. The Lease must carry the group's
	// labels (set Labels).
	Feed LeaseFeed
	// Labels are set on the Lease when this pod creates or writes it, so
	// that the group's label selector finds it.
	Labels map[string]string
	// DynamicLabels, if set, returns more labels, read again before every
	// write of the Lease (a renewal included): a member's state that the
	// group reads from its Lease, as its app's health. They are written
	// over Labels.
	DynamicLabels func() map[string]string
	// OwnLease says that the Lease is named after this candidate and no
	// other candidate contends it (a partition membership Lease): when it
	// is missing, it is created already held. Otherwise a missing Lease is
	// created without a holder and taken a lease duration later, like a
	// Lease replaced as `spec: {}` (see docs/safety.md).
	OwnLease bool
}

// Gate decides whether this pod may start a new term on a Lease now. Partition
// mode uses it to keep each pod to its fair share.
type Gate interface {
	// Admits reports, without reserving anything, whether a new term would
	// be admitted now. While it is false the elector does not try the Lease.
	Admits() bool
	// Admit admits one new term, to be written at once; done is called when
	// the write has returned (and the state shows its outcome).
	Admit() (done func(), ok bool)
}

// Validate checks the Lease spec (LeaseSpec.Validate), that the client is
// given, and the campaign and the advertised address.
func (c Config) Validate() error {
	errs := []error{c.LeaseSpec.Validate()}
	if c.Client == nil {
		errs = append(errs, errors.New("client must be set"))
	}
	switch c.Campaign {
	case "", CampaignAuto, CampaignManual, CampaignNever:
	default:
		errs = append(errs, fmt.Errorf("campaign %q is unknown (want %q, %q or %q)", c.Campaign, CampaignAuto, CampaignManual, CampaignNever))
	}
	if c.AdvertiseAddress != "" {
		if err := holderaddress.Check(c.AdvertiseAddress, c.AllowLoopbackAddress); err != nil {
			errs = append(errs, fmt.Errorf("advertise address %q: %w", c.AdvertiseAddress, err))
		}
	}
	return errors.Join(errs...)
}

// NewClientsets builds the clients the elector uses. requests is built as
// client-go's resourcelock.NewFromKubeconfig does: its own client with user
// agent "leader-election" and a request timeout of half the renew deadline,
// so that one slow request cannot use up the whole deadline. watches has the
// same user agent and no timeout, for the Lease watch. Both record the API
// server's clock into serverClock (pass it to the electors' Config).
func NewClientsets(cfg *rest.Config, renewDeadline time.Duration, serverClock *serverclock.Clock) (requests, watches kubernetes.Interface, err error) {
	c := rest.CopyConfig(cfg)
	rest.AddUserAgent(c, "leader-election")
	if serverClock != nil {
		c.Wrap(serverClock.WrapTransport)
	}
	w := rest.CopyConfig(c)
	c.Timeout = renewDeadline / 2
	if requests, err = kubernetes.NewForConfig(c); err != nil {
		return nil, nil, fmt.Errorf("build leader election client: %w", err)
	}
	if watches, err = kubernetes.NewForConfig(w); err != nil {
		return nil, nil, fmt.Errorf("build leader election watch client: %w", err)
	}
	return requests, watches, nil
}

// Elector takes part in the election for one Lease until its context ends.
// Losing the Lease is not fatal: it goes back to being a candidate. Unlike
// the controllers that exit when they lose their lease (they run guarded
// code in their own process), the sidecar guards no code: the app reads
// isLeader, which turned false at validUntil whatever happened, so staying
// up keeps the pod a standby without a restart.
type Elector struct {
	cfg      Config
	clock    clock.WithDelayedExecution
	tracker  *tracker
	metrics  *metrics
	lock     *observingLock
	cache    *leasecache.Cache
	campaign *campaign
	log      *transitionLog
	// backoff spaces out this candidate's takeover attempts after races
	// it lost (a large group's thundering herd).
	backoff *racebackoff.Backoff
	// writing is held by the lock for the whole of every Lease write.
	writing sync.Mutex
	healthz *leaderelection.HealthzAdaptor

	mu sync.Mutex
	// cancelRun stops the current round of client-go's elector.
	cancelRun context.CancelFunc
	// releasing is the pending POST /release, if any.
	releasing *releaseRequest
	running   bool
	// attempt fires when a candidate should try the Lease: at once when it
	// was released, exactly at its expiry when its holder stopped renewing.
	attempt clock.Timer
	// beforeRelease, if set, runs before a graceful release while this pod
	// still leads (see SetBeforeRelease).
	beforeRelease func(ctx context.Context, token int64) (resume func())
}

type releaseRequest struct {
	done chan error
	// sitOut is how long the elector stays out of the election afterwards;
	// closing end (endSitOut) ends it early.
	sitOut  time.Duration
	end     chan struct{}
	endOnce sync.Once
}

func (r *releaseRequest) endSitOut() { r.endOnce.Do(func() { close(r.end) }) }

// New returns an Elector for cfg.
func New(cfg Config) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := newTracker(clk, cfg.Namespace, cfg.Name, cfg.Identity, cfg.RenewDeadline, cfg.LeaseDuration)
	// Not a candidate until Run: an elector fed by a group but not running
	// (partition mode runs one only while its pod holds or wants the
	// partition) must not look as if it were racing for the Lease.
	t.claiming = false
	if cfg.ServerClock != nil {
		t.server = cfg.ServerClock
	}
	t.onState = cfg.OnState
	t.successorWait = cfg.RetryPeriod
	log := &transitionLog{tracker: t}
	t.onChange = func() {
		if cfg.OnChange != nil {
			cfg.OnChange()
		}
		log.wake()
	}
	e := &Elector{
		log:      log,
		cfg:      cfg,
		clock:    clk,
		tracker:  t,
		metrics:  newMetrics(t),
		healthz:  leaderelection.NewLeaderHealthzAdaptor(healthzGrace),
		campaign: newCampaign(cfg.Campaign),
		backoff:  racebackoff.New(clk, cfg.RetryPeriod, cfg.LeaseDuration),
	}
	watches := cfg.WatchClient
	if watches == nil {
		watches = cfg.Client
	}
	e.cache = leasecache.New(cfg.Namespace, cfg.Name, cfg.Client, watches, e.onLeaseChange)
	e.cache.OnKeep = func(lease *coordinationv1.Lease) {
		t.observeObject(lease)
		t.observeSuccessor(lease)
		t.observeHolderAddress(lease, cfg.AllowLoopbackAddress)
	}
	e.cache.BeforeWrite = func(lease *coordinationv1.Lease) *coordinationv1.Lease {
		return holderaddress.Annotate(dropSuccessor(lease, cfg.Identity), cfg.Identity, cfg.AdvertiseAddress)
	}
	if cfg.Group.Feed != nil {
		if err := cfg.Group.Feed.Feed(cfg.Namespace, cfg.Name, e.cache); err != nil {
			return nil, err
		}
	}
	e.lock = e.newLock()
	return e, nil
}

// newLock is New's lock: client-go's LeaseLock through the cache, and what
// this elector adds around it.
func (e *Elector) newLock() *observingLock {
	cfg, t := e.cfg, e.tracker
	return &observingLock{
		inner: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name},
			Client:     e.cache,
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity, EventRecorder: cfg.Events},
			Labels:     cfg.Group.Labels,
		},
		labels:  cfg.Group.Labels,
		dynamic: cfg.Group.DynamicLabels,
		tracker: t,
		cache:   e.cache,
		metrics: e.metrics,
		onLapse: e.stopRound,
		// The lock calls it from client-go's goroutine, outside the write
		// lock.
		onThrottled:  e.scheduleAttempt,
		gate:         cfg.Gate,
		takeoverRank: cfg.TakeoverRank,
		retryPeriod:  cfg.RetryPeriod,
		campaign:     e.campaign,
		backoff:      e.backoff,
		ownLease:     cfg.Group.OwnLease,
		writing:      &e.writing,
		readServerClock: func() error {
			_, err := cfg.Client.Discovery().ServerVersion()
			return err
		},
	}
}

// Snapshot returns the current state.
func (e *Elector) Snapshot() leadership.State { return e.withSuccessor(e.tracker.Snapshot()) }

// Watch returns the current state and a channel closed at its next change.
func (e *Elector) Watch() (leadership.State, <-chan struct{}) {
	s, changed := e.tracker.Watch()
	return e.withSuccessor(s), changed
}

// Collectors returns the election's Prometheus collectors.
func (e *Elector) Collectors() []prometheus.Collector { return e.metrics.collectors }

// Candidate reports whether the elector is running and has reached the API
// server (its readiness in --readiness=candidate mode).
func (e *Elector) Candidate() error {
	e.mu.Lock()
	running := e.running
	e.mu.Unlock()
	if !running {
		return errors.New("elector is not running")
	}
	if !e.tracker.ReachedAPI() {
		return errors.New("the API server has not answered a Lease request yet")
	}
	return nil
}

// Healthy fails when the elector is wedged: it holds the Lease but has not
// renewed it for longer than the lease duration plus a grace period.
func (e *Elector) Healthy() error { return e.healthz.Check(nil) }

// Release makes the leader step down: it stops claiming leadership and
// clears the Lease's holder (only if the Lease still names this pod's
// term). In auto mode it then stays out of the election for one lease
// duration, so that another candidate takes over (an Acquire ends that
// early); in manual mode it campaigns only when asked anyway. It returns
// ErrNotLeader if this pod does not lead.
func (e *Elector) Release(ctx context.Context) (leadership.State, error) {
	return e.ReleaseFor(ctx, e.sitOut())
}

// ReleaseFor is Release with the time this pod then stays out of the
// election. Partition mode hands a partition over with no sit-out at all:
// its Gate already keeps this pod from taking it back.
func (e *Elector) ReleaseFor(ctx context.Context, sitOut time.Duration) (leadership.State, error) {
	return e.releaseFor(ctx, sitOut, leadership.ReasonReleased, leadership.AnyTerm)
}

// ReleaseTerm is Release of one term: it releases only if this pod leads
// in the term whose fencing token is token (AnyTerm: whichever it leads
// in), and otherwise returns ErrNotLeader (it does not lead) or
// ErrOtherTerm (it leads in another term) and changes nothing. The term is
// checked and the claim given up under one lock, so a term that begins
// meanwhile is never released by a request meant for an earlier one.
func (e *Elector) ReleaseTerm(ctx context.Context, token int64) (leadership.State, error) {
	return e.releaseFor(ctx, e.sitOut(), leadership.ReasonReleased, token)
}

// ReleaseTermFor is ReleaseTerm with the time this pod then stays out of
// the election (see ReleaseFor).
func (e *Elector) ReleaseTermFor(ctx context.Context, sitOut time.Duration, token int64) (leadership.State, error) {
	return e.releaseFor(ctx, sitOut, leadership.ReasonReleased, token)
}

// StepDown is ReleaseFor with the reason the term ends for (the log line,
// the Event and State.LastChange say it) and no sit-out: the caller's Gate
// keeps this pod out of the election for as long as it must (health
// gating: while its app is unhealthy).
func (e *Elector) StepDown(ctx context.Context, reason leadership.Reason) (leadership.State, error) {
	return e.releaseFor(ctx, 0, reason, leadership.AnyTerm)
}

// LeaseMissing reports whether the watch has shown that the Lease does not
// exist. A running elector creates a missing Lease without a holder and
// takes it a lease duration after it first saw it missing (see
// GroupMember.OwnLease).
func (e *Elector) LeaseMissing() bool { return e.cache.Missing() }

// SittingOut reports whether the elector is releasing the Lease or staying
// out of the election after a release (see ReleaseFor).
func (e *Elector) SittingOut() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.releasing != nil
}

// SetDegraded sets why this pod is degraded, "" when it is not (see
// State.Degraded).
func (e *Elector) SetDegraded(reason string) { e.tracker.setDegraded(reason) }

// SetBeforeRelease makes every graceful release (Release, ReleaseTerm,
// StepDown) call f first, while this pod still leads in the term token, and
// wait for it: the forwarding proxy lets the requests in flight to the app
// end within the term, instead of cutting them after it. f bounds its own
// time; a term that ends meanwhile is not released. If the release then
// does not happen (another release is under way, the round is between
// attempts, the term changed), the elector calls the resume f returned,
// and the pod goes on leading as before. A shutdown does not call f: the
// app is stopping too.
func (e *Elector) SetBeforeRelease(f func(ctx context.Context, token int64) (resume func())) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.beforeRelease = f
}

func (e *Elector) releaseFor(ctx context.Context, sitOut time.Duration, reason leadership.Reason, token int64) (leadership.State, error) {
	e.mu.Lock()
	before := e.beforeRelease
	e.mu.Unlock()
	resume, anyTerm := func() {}, token == leadership.AnyTerm
	if s := e.Snapshot(); before != nil && s.IsLeader && (anyTerm || token == s.FencingToken) && !e.SittingOut() {
		resume = before(ctx, s.FencingToken)
		// Release the term that was drained, not one that began since.
		token = s.FencingToken
	}
	e.mu.Lock()
	if e.releasing != nil {
		// Another release is ending the term: nothing to resume.
		e.mu.Unlock()
		return e.Snapshot(), leadership.ErrNotLeader
	}
	if e.cancelRun == nil {
		e.mu.Unlock()
		resume()
		return e.Snapshot(), leadership.ErrNotLeader
	}
	if err := e.tracker.stopClaimingTerm(token, reason); err != nil {
		e.mu.Unlock()
		resume()
		if anyTerm && errors.Is(err, leadership.ErrOtherTerm) {
			// The drained term ended meanwhile; the caller named none.
			err = leadership.ErrNotLeader
		}
		return e.Snapshot(), err
	}
	req := &releaseRequest{done: make(chan error, 1), sitOut: sitOut, end: make(chan struct{})}
	e.releasing = req
	e.cancelRun()
	e.mu.Unlock()

	select {
	case err := <-req.done:
		return e.Snapshot(), err
	case <-ctx.Done():
		return e.Snapshot(), ctx.Err()
	}
}

// onLeaseChange is called with every version of the Lease the watch
// delivers (nil: deleted).
func (e *Elector) onLeaseChange(lease *coordinationv1.Lease) {
	// A Lease this candidate was about to take (its attempt was due: not
	// still waiting out its back-off), now held by another, is a race
	// lost, whether its write was refused or it saw the winner before it
	// wrote. Counted once per race, on the version that shows the winner.
	// A candidate still waiting when the winner appears lost nothing: its
	// delay already kept it out of the race. Counting those too would grow
	// every follower but the winner to the largest delay, and in a small
	// group the only candidate left without one may be a new pod that has
	// to wait a lease duration from when it first saw the Lease (measured:
	// 3 candidates' crash takeover 40 ms later).
	wasTakeable := e.tracker.takeable() && e.lock.admits() && !e.lock.backingOff()
	if lease == nil {
		e.tracker.observeDeleted()
	} else {
		e.tracker.observeRead(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)))
	}
	if wasTakeable && lease != nil && ptr.Deref(lease.Spec.HolderIdentity, "") != "" && e.tracker.contended() {
		e.backoff.Lost()
	}
	e.scheduleAttempt()
}

// scheduleAttempt arms the attempt timer for the next moment this candidate
// may take the Lease, after its back-off if it has lost races (racebackoff.Backoff;
// until then the lock shows the Lease to client-go as held). client-go's
// elector only tries every retry period; starting a new round makes it try
// at once.
func (e *Elector) scheduleAttempt() { e.armAttempt(true) }

// scheduleWaitingAttempt arms the attempt timer only if the next moment this
// candidate may take the Lease is still ahead. A run does so at its start:
// its first round tries at once, but a Lease it may take only after a wait
// (its back-off after lost races) is shown to client-go as held, and the
// change that started that wait may have been observed before the run
// (partition mode starts a partition's elector when a watch event shows the
// partition free), when no timer was armed: client-go would try again only
// a retry period later.
func (e *Elector) scheduleWaitingAttempt() { e.armAttempt(false) }

// armAttempt is scheduleAttempt; with now false, a moment already reached
// arms nothing.
func (e *Elector) armAttempt(now bool) {
	at, ok := e.tracker.nextAttempt()
	at = at.Add(e.lock.takeoverWait())
	if until := e.backoff.ThrottledUntil(); at.Before(until) {
		at = until
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.attempt != nil {
		e.attempt.Stop()
		e.attempt = nil
	}
	if !ok || e.releasing != nil || !e.running {
		return
	}
	// A millisecond late when it waits for an expiry or a back-off, so
	// that the moment has certainly passed when the lock checks it again;
	// a Lease released (or a wait already over) is tried at once: that
	// millisecond was a tenth of a handover on the local store.
	d := at.Sub(e.clock.Now())
	switch {
	case d > 0:
		d += time.Millisecond
	case !now:
		return
	default:
		d = 0
	}
	e.attempt = e.clock.AfterFunc(d, e.attemptNow)
}

// attemptNow restarts the round so that client-go tries at once. It waits
// for a write on its way to finish first: that write may be the acquisition
// itself, and cutting its round short would undo a success.
func (e *Elector) attemptNow() {
	e.writing.Lock()
	defer e.writing.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.releasing != nil || e.cancelRun == nil || e.tracker.holdingLease() || !e.campaign.Admits() {
		return
	}
	e.cancelRun()
}

// TryNow makes a candidate that does not hold the Lease try it at once
// (or at its expiry) instead of at client-go's next retry; a Gate's owner
// calls it when the gate starts to admit.
func (e *Elector) TryNow() { go e.attemptNow() }

// stopRound ends the current round of client-go's elector; Run starts a new
// one.
func (e *Elector) stopRound() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cancelRun != nil {
		e.cancelRun()
	}
}

// Run takes part in the election until ctx ends. Then it stops claiming
// leadership at once and, with ReleaseOnShutdown, clears the Lease after
// client-go has stopped renewing it. It returns an error only if the election
// cannot be set up, or if it is already running.
//
// Run may be called again after it has returned: an elector of a LeaseGroup
// keeps following its Lease in between (Snapshot stays current), without a
// goroutine of its own. Partition mode runs a partition's elector only while
// its pod holds or wants the partition.
func (e *Elector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(e.cfg.Namespace, e.cfg.Name), "identity", e.cfg.Identity)
	ctx = klog.NewContext(ctx, logger)
	if err := e.startRunning(); err != nil {
		return err
	}
	// Last of all, once nothing of this run is left on its way.
	defer e.stopRunning()

	e.tracker.setClaiming(true, "")
	e.scheduleWaitingAttempt()
	ctx, stopShutdownWatch := e.untilClaimsStop(ctx)
	defer stopShutdownWatch()
	if e.cfg.Group.Feed == nil {
		// A group's elector keeps following its Lease after Run (see
		// above): its tracker's timer must still publish the holder's
		// expiry then, or a crashed holder's partition would be noticed
		// late.
		defer e.tracker.stop()
	}
	e.setLoggers(logger)
	e.log.start(logger)
	stopWatch := e.watchLease(ctx)
	defer stopWatch()

	var err error
	for ctx.Err() == nil {
		if err = e.runRound(ctx); err != nil {
			break
		}
		e.serveRelease(ctx)
	}

	e.stopClaiming()
	if err == nil && e.cfg.ReleaseOnShutdown {
		e.releaseOnShutdown(ctx)
	}
	// The last round's elector may still name this pod (a release): it
	// must not make a stopped elector look wedged.
	e.healthz.SetLeaderElection(nil)
	e.log.stop()
	return err
}

// Follow keeps the elector's view of the Lease (Watch, Snapshot) current
// after Run has returned, until ctx ends, with a watch of its own and no
// claim: a stopping pod's forwarding proxy sends the clients the Service
// still routes to it on to the new leader. A group's elector is fed by its
// group, and Follow returns at once.
func (e *Elector) Follow(ctx context.Context) {
	if e.cfg.Group.Feed == nil {
		// What it observes re-arms the tracker's expiry timer.
		defer e.tracker.stop()
		e.cache.Run(ctx)
	}
}

// startRunning marks the elector running, or fails if it already is.
func (e *Elector) startRunning() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.running {
		return fmt.Errorf("elector for lease %s/%s is already running", e.cfg.Namespace, e.cfg.Name)
	}
	e.running = true
	return nil
}

func (e *Elector) stopRunning() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = false
}

// untilClaimsStop returns the context the election runs on, and stops
// claiming leadership as soon as shutdownCtx ends. Readers must see "not
// leader" the moment shutdown begins, not when client-go notices the
// cancelled context: the election runs on a context that ends only after
// claims have stopped, so that the term is recorded as ended by the
// shutdown (in the log and in client-go's "stopped leading" Event)
// whichever goroutine runs first.
func (e *Elector) untilClaimsStop(shutdownCtx context.Context) (context.Context, func()) {
	ctx, stopElection := context.WithCancel(context.WithoutCancel(shutdownCtx))
	stopClaiming := context.AfterFunc(shutdownCtx, func() {
		e.tracker.setClaiming(false, leadership.ReasonShutdown)
		stopElection()
	})
	return ctx, func() {
		stopClaiming()
		stopElection()
	}
}

// setLoggers gives the lock and the tracker the run's logger for what
// they report.
func (e *Elector) setLoggers(logger klog.Logger) {
	e.lock.logClockUnread = func(err error) {
		logger.V(2).Info("Could not read the API server's version before taking a Lease without history; using its clock as last known", "err", err)
	}
	e.lock.logExhausted = func(err error) {
		logger.Error(err, "Cannot start a new term on this lease")
	}
	e.tracker.setWarnAhead(func(token, clock int64) {
		logger.Info("The Lease's fencing token is ahead of the API server's clock (edited by hand, or the server's clock went back); terms start anyway, and the token is not guaranteed to grow across a re-creation of the Lease while no sidecar runs", "fencingToken", token, "serverClockSeconds", clock)
	})
}

// watchLease starts the Lease's own watch (a group's elector is fed by the
// group instead) and returns the function that stops it and waits for it.
func (e *Elector) watchLease(ctx context.Context) (stop func()) {
	cacheCtx, stopCache := context.WithCancel(ctx)
	cacheDone := make(chan struct{})
	go func() {
		defer close(cacheDone)
		if e.cfg.Group.Feed == nil {
			e.cache.Run(cacheCtx)
		}
	}()
	return func() {
		stopCache()
		<-cacheDone
	}
}

// stopClaiming stops claiming leadership for good (shutdown) and stops the
// next attempt.
func (e *Elector) stopClaiming() {
	e.tracker.setClaiming(false, leadership.ReasonShutdown)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.attempt != nil {
		e.attempt.Stop()
		e.attempt = nil
	}
}

// releaseOnShutdown clears the Lease (ReleaseOnShutdown) after client-go
// has stopped renewing it.
func (e *Elector) releaseOnShutdown(ctx context.Context) {
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := e.release(relCtx); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to release lease on shutdown; it expires after the lease duration")
	}
}

// runRound runs client-go's elector once: until it loses the Lease, the
// round is stopped (release, lapsed claim) or ctx ends.
func (e *Elector) runRound(ctx context.Context) error {
	roundCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:          e.lock,
		LeaseDuration: e.cfg.LeaseDuration,
		RenewDeadline: e.cfg.RenewDeadline,
		RetryPeriod:   e.cfg.RetryPeriod,
		Name:          e.cfg.Name,
		WatchDog:      e.healthz,
		// client-go's own release trusts a possibly stale "am I leader" and
		// can clear a Lease another pod has taken; we release ourselves.
		ReleaseOnCancel: false,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {},
			OnStoppedLeading: func() { e.tracker.stoppedLeading() },
		},
	})
	if err != nil {
		return fmt.Errorf("set up leader election: %w", err)
	}
	e.healthz.SetLeaderElection(le)
	e.mu.Lock()
	e.cancelRun = cancel
	e.mu.Unlock()

	le.Run(klog.NewContext(roundCtx, quietExpected(klog.FromContext(roundCtx), func() bool { return roundCtx.Err() != nil })))

	e.mu.Lock()
	e.cancelRun = nil
	e.mu.Unlock()
	return nil
}

// serveRelease completes a pending POST /release after the round it stopped
// has ended: clear the Lease, then sit out (one lease duration for POST
// /release).
func (e *Elector) serveRelease(ctx context.Context) {
	e.mu.Lock()
	req := e.releasing
	e.mu.Unlock()
	if req == nil {
		return
	}
	err := e.releaseUntilExpiry(ctx)
	req.done <- err

	if req.sitOut > 0 {
		select {
		case <-ctx.Done():
		case <-e.clock.After(req.sitOut):
		case <-req.end:
		}
	}
	e.mu.Lock()
	e.releasing = nil
	e.mu.Unlock()
	if ctx.Err() == nil {
		e.tracker.setClaiming(true, "")
		// The Lease may have changed during the sit-out, when no attempt
		// was scheduled: schedule one from what was observed.
		e.scheduleAttempt()
	}
}

// releaseUntilExpiry clears the Lease (release), trying again while a try
// fails and the claim it ends could still be renewed: until a lease
// duration after this pod's last renewal, when any candidate may take the
// Lease anyway, or until ctx ends. Each try is bounded by releaseTimeout.
// One try was not enough: measured at 1,024 partitions on a loaded API
// server, releases an app had acknowledged timed out after 2 s now and
// then, and each such partition stayed unowned until its Lease expired
// (30 s there) instead of moving at once.
// A try that fails at once (a refusal) is tried again after a pause that
// doubles from one racebackoff.Slot (a tenth of the retry period) up to the
// retry period.
func (e *Elector) releaseUntilExpiry(ctx context.Context) error {
	expiry := e.tracker.lastRenewTime().Add(e.cfg.LeaseDuration)
	pause := racebackoff.Slot(e.cfg.RetryPeriod)
	for tries := 1; ; tries++ {
		relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		err := e.release(relCtx)
		cancel()
		if err == nil || !e.clock.Now().Add(pause).Before(expiry) {
			return err
		}
		if tries == 1 {
			klog.FromContext(ctx).Info("Releasing the lease failed; trying again until the claim it ends would expire", "err", err, "expires", expiry)
		}
		select {
		case <-ctx.Done():
			return err
		case <-e.clock.After(pause):
		}
		pause = min(2*pause, e.cfg.RetryPeriod)
	}
}

// release clears the Lease's holder, but only if the Lease still names
// this process's own term: never clear a Lease someone else has taken. The
// Lease is read from the watch-backed cache and the write is conditional on
// its resourceVersion, so if the cache was behind the write fails with a
// conflict, the Lease is read again and checked again.
func (e *Elector) release(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	token, ok := e.tracker.ownTerm()
	if !ok {
		return nil
	}
	leases := e.cache.Leases(e.cfg.Namespace)
	for range 3 {
		lease, err := leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
		}
		current := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
		if current.HolderIdentity != e.cfg.Identity || int64(current.LeaderTransitions) != token {
			logger.Info("Not releasing lease: it no longer holds this pod's term", "holder", current.HolderIdentity, "fencingToken", current.LeaderTransitions)
			e.tracker.observeRead(recordOf(current))
			return nil
		}
		now := metav1.NewMicroTime(e.clock.Now())
		lease.Spec.HolderIdentity = ptr.To("")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		lease.Spec.AcquireTime = &now
		lease.Spec.RenewTime = &now
		successor := e.pickSuccessor(token)
		nameSuccessor(lease, successor)
		updated, err := leases.Update(ctx, lease, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("release lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
		}
		e.tracker.observeRelease(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&updated.Spec)))
		logger.Info("Released lease", "fencingToken", token, "successor", successor)
		if successor != "" {
			e.lock.RecordHandover(token, successor)
		}
		return nil
	}
	return fmt.Errorf("release lease %s/%s: it kept changing under us", e.cfg.Namespace, e.cfg.Name)
}
