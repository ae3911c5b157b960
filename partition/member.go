// Package partition spreads N partition Leases fairly across the pods of a
// group (lease-based consumption, as the Kinesis Client Library does with
// shard leases): each partition is one election of package election, with
// its time-bounded ownership and fencing token, and a Gate keeps every pod to
// its fair share. Each pod also holds a membership Lease of its own, so that
// every pod can count the live members. One label-selected watch feeds all of
// it: a pod that owns nothing sends no requests.
package partition

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/internal/racebackoff"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/serverclock"
)

// Config configures a Member.
type Config struct {
	// LeaseSpec names the group and this pod, and its timings apply to
	// every Lease of the group. The group's Leases are Name-p<i> and
	// Name-m-<hash of identity>, in Namespace. ReleaseOnShutdown clears
	// every Lease this pod holds when Run's context ends, so that the
	// others take its partitions at once.
	election.LeaseSpec
	// Partitions is N, 1..MaxPartitions.
	Partitions int
	// DrainTimeout is how long a partition this pod is to hand over (it owns
	// more than its fair share) is shown as draining before it is released
	// anyway: the app finishes, checkpoints and releases it itself (POST
	// /partitions/<i>/release) within that time. 0 releases at once. A
	// crash or a shutdown never waits for it.
	DrainTimeout time.Duration
	// Client and WatchClient as in election.Config (see
	// election.NewClientsets).
	Client, WatchClient kubernetes.Interface
	// ServerClock as in election.Config.
	ServerClock *serverclock.Clock
	// AppHealth, if set, gates this pod's share on its app's health
	// (--app-health-url): see shareAmong.
	AppHealth AppHealth
	// Clock is for tests; nil means the real clock.
	Clock clock.WithDelayedExecution
}

// AppHealth is the app's health as health gating probes it.
type AppHealth interface {
	// Healthy reports the app's health and, while it is unhealthy, why.
	Healthy() (bool, error)
}

// Validate checks the group's own rules; the electors check the rest.
func (c Config) Validate() error {
	var errs []error
	if c.DrainTimeout < 0 || c.DrainTimeout > MaxDrainTimeout {
		errs = append(errs, fmt.Errorf("drain timeout must be within 0..%v, got %v", MaxDrainTimeout, c.DrainTimeout))
	}
	if c.Partitions < 1 || c.Partitions > MaxPartitions {
		errs = append(errs, fmt.Errorf("partitions must be within 1..%d, got %d", MaxPartitions, c.Partitions))
	}
	if len(c.Name) > MaxGroupNameLength {
		errs = append(errs, fmt.Errorf("group name %q is longer than %d characters (it is a label value)", c.Name, MaxGroupNameLength))
	}
	return errors.Join(errs...)
}

// Member takes part in a partition group until its context ends.
type Member struct {
	cfg        Config
	clock      clock.WithDelayedExecution
	group      *LeaseGroup
	membership *election.Elector
	partitions []*election.Elector
	metrics    *metrics
	logger     klog.Logger
	// checkpointLimits rate-limit each partition's checkpoints.
	checkpointLimits []*rate.Limiter
	// offset is where this pod starts looking for free partitions, so
	// that members that all need some do not all race for the same ones.
	offset int
	// wake is poked (never blocking) by every change the Member should
	// react to.
	wake chan struct{}

	mu sync.Mutex
	// admitted are the partitions whose acquisitions the gate admitted
	// and that have not returned yet (an elector writes one at a time).
	admitted map[int]bool
	// refused are the partitions whose gate refused a new term since their
	// elector was last told to try now (startLocked). Only those are told:
	// a nudge restarts the elector's round, cancelling an attempt in
	// flight, and a reconcile runs on every change in the group (hundreds
	// a second while 1,024 partitions settle); nudging every wanted
	// partition each time kept their attempts from ever finishing.
	refused map[int]bool
	// freeSince is when reconcile first saw each free partition free
	// (trackFreeLocked).
	freeSince map[int]time.Time
	// runs are the partition electors running now. An elector runs only
	// while this pod holds its partition or wants it (reconcile): the
	// others follow their Leases through the group's watch without a
	// goroutine, so that a member's goroutines grow with its share, not
	// with N.
	runs map[int]*run
	// running and fail are Run's: every elector run is counted in running,
	// and one that cannot run ends Run with fail.
	running *sync.WaitGroup
	fail    func(error)
	// handover is the partition this pod released to fix an imbalance and
	// nobody has taken yet; another is released only once it is taken, so
	// that processing moves one partition at a time.
	handover      int
	handoverSince time.Time
	// releasing counts the releases of handovers on their way.
	releasing int
	// acknowledged are the draining partitions the app has released
	// (ReleaseTerm) whose releases are on their way: until its claim has
	// stopped a reconcile still sees such a partition owned and surplus,
	// and must not put it back into the drain.
	acknowledged map[int]bool
	// retiring are the partitions at or above the effective N whose
	// releases are on their way.
	retiring map[int]bool
	// draining are the partitions this pod will hand over, each once the
	// app has released it or, at the latest, at drainDeadline.
	draining      map[int]bool
	drainDeadline time.Time
	// membersChanged is when this pod last saw the set of members (or the
	// effective N) change;
	// settled is whether it has seen a full and fair assignment since.
	members        []string
	sharing        []string
	effective      int
	membersChanged time.Time
	settled        bool
	published      string
	revision       uint64
	changed        chan struct{}
	owned          map[int]int64
}

// New returns a Member for cfg.
func New(cfg Config) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	m := &Member{
		cfg:          cfg,
		clock:        clk,
		wake:         make(chan struct{}, 1),
		handover:     -1,
		draining:     map[int]bool{},
		retiring:     map[int]bool{},
		changed:      make(chan struct{}),
		owned:        map[int]int64{},
		admitted:     map[int]bool{},
		refused:      map[int]bool{},
		freeSince:    map[int]time.Time{},
		acknowledged: map[int]bool{},
		runs:         map[int]*run{},
		logger:       klog.Background(),
		offset:       startOffset(cfg.Identity, cfg.Partitions),
	}
	watches := cfg.WatchClient
	if watches == nil {
		watches = cfg.Client
	}
	m.group = NewLeaseGroup(cfg.Namespace, groupLabels(cfg.Name), watches, clk, m.poke)
	elector := func(name, kind string, gate election.Gate) (*election.Elector, error) {
		labels := leaseLabels(cfg.Name, kind)
		var dynamic func() map[string]string
		if kind == KindMember {
			labels = memberLabels(cfg.Name, cfg.Partitions)
			if cfg.AppHealth != nil {
				// Every renewal publishes the app's health, for the
				// others' shares (shareAmong).
				dynamic = func() map[string]string {
					healthy, _ := cfg.AppHealth.Healthy()
					return map[string]string{AppHealthyLabel: strconv.FormatBool(healthy)}
				}
			}
		}
		// A membership Lease goes with its pod (it is named after it);
		// partition Leases stay, with their fencing tokens.
		spec := cfg.LeaseSpec
		spec.Name = name
		return election.New(election.Config{
			LeaseSpec: spec,
			Group: election.GroupMember{
				Feed:          m.group,
				Labels:        labels,
				DynamicLabels: dynamic,
				OwnLease:      kind == KindMember,
			},
			ServerClock: cfg.ServerClock,
			Client:      cfg.Client,
			WatchClient: watches,
			Gate:        gate,
			OnChange:    m.poke,
			Clock:       cfg.Clock,
		})
	}
	var err error
	if m.membership, err = elector(MemberLease(cfg.Name, cfg.Identity), KindMember, nil); err != nil {
		return nil, err
	}
	m.partitions = make([]*election.Elector, cfg.Partitions)
	m.checkpointLimits = make([]*rate.Limiter, cfg.Partitions)
	for i := range m.partitions {
		m.checkpointLimits[i] = newCheckpointLimiter(cfg.RetryPeriod)
		if m.partitions[i], err = elector(PartitionLease(cfg.Name, i), KindPartition, gate{m, i}); err != nil {
			return nil, err
		}
	}
	m.metrics = newMetrics(m)
	return m, nil
}

// AppHealthChanged tells the member that its app's health changed: it
// moves towards its new share at once.
func (m *Member) AppHealthChanged() { m.poke() }

// poke wakes the reconcile loop; it never blocks.
func (m *Member) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run takes part in the group until ctx ends; then every Lease this pod
// holds stops being claimed at once and, with ReleaseOnShutdown, is cleared.
func (m *Member) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("group", klog.KRef(m.cfg.Namespace, m.cfg.Name), "identity", m.cfg.Identity)
	ctx = klog.NewContext(ctx, logger)
	m.mu.Lock()
	m.logger = logger
	m.mu.Unlock()

	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	var watchDone sync.WaitGroup
	watchDone.Go(func() { m.group.Run(watchCtx) })
	defer func() {
		stopWatch()
		watchDone.Wait()
	}()

	// An elector that cannot run stops the member: it is a bug, not a
	// state to wait out.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	// Every elector is waited for below, after the loop, before the last
	// view is published.
	var running sync.WaitGroup
	var failed error
	fail := func(err error) {
		m.mu.Lock()
		if failed == nil {
			failed = err
		}
		m.mu.Unlock()
		stop()
	}
	running.Go(func() {
		if err := m.membership.Run(ctx); err != nil {
			fail(err)
			return
		}
		if m.cfg.ReleaseOnShutdown {
			m.deleteMembership(ctx)
		}
	})
	m.mu.Lock()
	m.running = &running
	m.fail = fail
	m.membersChanged = m.clock.Now()
	m.mu.Unlock()
	// Time alone changes the view too (a member's Lease expires); the
	// timer bounds how late that is noticed.
	tick := m.clock.NewTimer(m.cfg.RetryPeriod)
	defer tick.Stop()
	for ctx.Err() == nil {
		m.reconcile(ctx)
		select {
		case <-ctx.Done():
		case <-m.wake:
		case <-tick.C():
		}
		tick.Reset(m.cfg.RetryPeriod)
	}
	running.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.publishLocked(m.assess())
	return failed
}

// run is a partition elector's run.
type run struct {
	stop     context.CancelFunc
	stopping bool
}

// startLocked runs partition i's elector, which tries the partition at once;
// if it runs already and its gate refused it since it was last told, it is
// told to try now (else it is trying, or following a holder's claim, and
// tries when that ends).
func (m *Member) startLocked(ctx context.Context, i int) {
	if r := m.runs[i]; r != nil {
		if !r.stopping && m.refused[i] {
			delete(m.refused, i)
			m.partitions[i].TryNow()
		}
		// A stopping run is started again once it has returned (it
		// pokes the reconcile loop).
		return
	}
	runCtx, stop := context.WithCancel(ctx)
	r := &run{stop: stop}
	m.runs[i] = r
	delete(m.refused, i) // a new run tries at once
	m.running.Go(func() {
		err := m.partitions[i].Run(runCtx)
		stop()
		m.mu.Lock()
		if m.runs[i] == r {
			delete(m.runs, i)
		}
		m.mu.Unlock()
		if err != nil {
			m.fail(fmt.Errorf("partition %d: %w", i, err))
		}
		m.poke()
	})
}

// trackFreeLocked records since when each partition below the effective N
// has been free, as this pod's reconciles saw it: a free partition whose
// preferred taker (FreeToTry) has not taken it within longFreeAfter may be
// tried by any member below its target. A reconcile is due then.
func (m *Member) trackFreeLocked(v view, now time.Time) {
	for i := range m.freeSince {
		if i >= v.effective || v.owners[i] != "" {
			delete(m.freeSince, i)
		}
	}
	newlyFree := false
	for i := range v.effective {
		if _, seen := m.freeSince[i]; !seen && v.owners[i] == "" {
			m.freeSince[i] = now
			newlyFree = true
		}
	}
	if newlyFree {
		m.clock.AfterFunc(m.longFreeAfter(), m.poke)
	}
}

// longFreeAfter is how long a free partition is left to its preferred
// taker: one slot of a deterministic takeover order (racebackoff.Slot, a
// tenth of the retry period), the time a conditional write and the watch
// event of its result take. Longer would leave a partition free for that
// long whenever the members' views of who needs partitions differ for a
// moment (the preferred taker may not see itself as one); shorter would
// bring the races back.
func (m *Member) longFreeAfter() time.Duration { return racebackoff.Slot(m.cfg.RetryPeriod) }

// startMissingLocked runs the electors of the partitions whose Leases are
// missing (a new group, or N grew): each creates its Lease without a holder,
// to be taken a lease duration after it was first seen missing. Every member
// runs those electors at once, so that the wait for all of them runs from
// the start: were a missing Lease created only when some member wanted it, a
// large group would settle in several waits of a lease duration, one after
// another.
func (m *Member) startMissingLocked(ctx context.Context, v view) {
	for i := range v.effective {
		if m.runs[i] == nil && m.partitions[i].LeaseMissing() {
			m.startLocked(ctx, i)
		}
	}
}

// stopIdleLocked stops the electors of the partitions this pod neither
// holds nor wants: not tried now, not its own (a term or a release of its
// on its way), not writing, not sitting out a release (a restarted elector
// would not), not about to create a missing Lease.
func (m *Member) stopIdleLocked(v view, tried []int) {
	for i, r := range m.runs {
		if r.stopping || slices.Contains(tried, i) || v.states[i].IsLeader || v.owners[i] == m.cfg.Identity ||
			m.admitted[i] || m.partitions[i].SittingOut() || m.partitions[i].LeaseMissing() {
			continue
		}
		r.stopping = true
		r.stop()
	}
}

// reconcile publishes the state and moves this pod towards its fair share of
// the effective N: it asks for free partitions while it owns fewer than its
// target, hands surplus partitions over one at a time while it owns more,
// and gives up every partition at or above the effective N (the group no
// longer works on those, so no one waits to take them).
func (m *Member) reconcile(ctx context.Context) {
	// The view is taken under m.mu, as the gate takes its own: an
	// acquisition is admitted under m.mu and stays in m.admitted until its
	// write, already in its elector's state, has returned. A view taken
	// before the lock could miss an acquisition that ended meanwhile (in
	// neither m.admitted nor the view), and stopIdleLocked would stop the
	// elector that had just taken its partition, leaving it unowned for a
	// lease duration. Lock order: m.mu, then an elector's state.
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.clock.Now()
	v := m.assess()
	m.publishLocked(v)
	if !v.member {
		return
	}
	m.trackFreeLocked(v, now)
	var tried []int
	if want := v.target - m.takingLocked(v); want > 0 {
		longFree := func(i int) bool { return now.Sub(m.freeSince[i]) >= m.longFreeAfter() }
		tried = FreeToTry(v.owners[:v.effective], want, m.cfg.Identity, v.needy, m.offset%v.effective, longFree)
		for _, i := range tried {
			m.startLocked(ctx, i)
		}
	}
	m.startMissingLocked(ctx, v)
	m.stopIdleLocked(v, tried)
	// A handover ends when the partition is taken, after a lease duration,
	// or once it is beyond the effective N (the N fell meanwhile: no one
	// is to take it, so nothing waits for that).
	if m.handover >= 0 && (m.taken(v, m.handover) || now.Sub(m.handoverSince) >= m.cfg.LeaseDuration || m.handover >= v.effective) {
		m.handover = -1
	}
	if len(m.draining) > 0 {
		m.continueDrainLocked(ctx, v, now)
		return
	}
	var excess, retire []int
	for _, p := range Surplus(v.mine, v.effective, v.target) {
		switch {
		case p < v.effective:
			excess = append(excess, p)
		case !m.retiring[p]:
			retire = append(retire, p)
		}
	}
	if m.handover >= 0 || m.releasing > 0 {
		// Processing moves one partition at a time; partitions beyond
		// the effective N do not move, they stop.
		excess = nil
	}
	if m.cfg.DrainTimeout > 0 {
		// Ask the app first: it finishes, checkpoints and releases each
		// surplus partition. They drain together, so that a rebalance
		// waits for one drain timeout at most, however many move.
		surplus := append(excess, retire...)
		if len(surplus) == 0 {
			return
		}
		for _, p := range surplus {
			m.draining[p] = true
		}
		m.drainDeadline = now.Add(m.cfg.DrainTimeout)
		m.clock.AfterFunc(m.cfg.DrainTimeout, m.poke)
		klog.FromContext(ctx).Info("Draining partitions above the fair share or beyond the group's effective partition count; the app may release each before the drain deadline", "partitions", surplus, "owned", len(v.inRange), "target", v.target, "members", len(v.members), "effectivePartitions", v.effective, "drainDeadline", m.drainDeadline)
		m.publishLocked(v)
		return
	}
	for _, p := range retire {
		m.retireLocked(ctx, v, p)
	}
	if p, ok := ToRelease(excess); ok {
		klog.FromContext(ctx).Info("Handing over a partition above the fair share", "partition", p, "owned", len(v.mine), "target", v.target, "members", len(v.members))
		m.handOverLocked(ctx, p, now)
	}
}

// continueDrainLocked follows the partitions being drained: one lost
// meanwhile (its claim lapsed) has nothing left to hand over; when the
// pod is no longer above its share (a member left) it keeps the rest; at
// the drain deadline it hands over those the app has not released.
func (m *Member) continueDrainLocked(ctx context.Context, v view, now time.Time) {
	logger := klog.FromContext(ctx)
	changed := false
	for p := range m.draining {
		if !slices.Contains(v.mine, p) {
			delete(m.draining, p)
			changed = true
		}
	}
	// Partitions that became surplus while the drain runs (more members
	// joined) join it, with its deadline: a rebalance waits for one drain
	// timeout however the members arrive, not one per member seen.
	surplus := Surplus(v.mine, v.effective, v.target)
	for _, p := range surplus {
		if !m.draining[p] && p != m.handover && !m.retiring[p] && !m.acknowledged[p] {
			logger.Info("Partition became surplus during a drain; it joins the drain", "partition", p, "owned", len(v.mine), "target", v.target, "drainDeadline", m.drainDeadline)
			m.draining[p] = true
			changed = true
		}
	}
	// Still to hand over: the surplus, less what is on its way already.
	// A partition beyond the effective N is never kept.
	keep := len(m.draining) - len(surplus)
	for _, p := range slices.Sorted(maps.Keys(m.draining)) {
		if keep <= 0 || p >= v.effective {
			break
		}
		logger.Info("Partition no longer to be handed over; keeps it", "partition", p, "owned", len(v.mine), "target", v.target)
		delete(m.draining, p)
		keep--
		changed = true
	}
	if len(m.draining) > 0 && !now.Before(m.drainDeadline) {
		late := slices.Sorted(maps.Keys(m.draining))
		logger.Info("The app did not release the draining partitions within the drain timeout; handing them over", "partitions", late, "drainTimeout", m.cfg.DrainTimeout)
		clear(m.draining)
		for _, p := range late {
			if p >= v.effective {
				m.retireLocked(ctx, v, p)
			} else {
				m.handOverLocked(ctx, p, now)
			}
		}
		changed = true
	}
	if len(m.draining) == 0 {
		m.drainDeadline = time.Time{}
	}
	if changed {
		m.publishLocked(v)
	}
}

// handOverLocked releases partition p to fix an imbalance; the next is
// handed over only once p has been taken.
func (m *Member) handOverLocked(ctx context.Context, p int, now time.Time) {
	m.handover, m.handoverSince = p, now
	m.releasing++
	m.metrics.rebalances.Inc()
	go func() {
		if _, err := m.partitions[p].ReleaseFor(ctx, 0); err != nil && !errors.Is(err, leadership.ErrNotLeader) {
			klog.FromContext(ctx).Error(err, "Failed to release partition; it expires after the lease duration", "partition", p)
		}
		m.mu.Lock()
		m.releasing--
		m.mu.Unlock()
		m.poke()
	}()
}

// retireLocked releases partition p, at or above the effective N: no member
// takes it while the effective N stays below it, so the next release does not
// wait for it to be taken (as a handover's does).
func (m *Member) retireLocked(ctx context.Context, v view, p int) {
	m.retiring[p] = true
	m.metrics.rebalances.Inc()
	go func() {
		logger := klog.FromContext(ctx)
		logger.Info("Giving up a partition beyond the group's effective partition count", "partition", p, "effectivePartitions", v.effective, "partitions", len(m.partitions))
		if _, err := m.partitions[p].ReleaseFor(ctx, 0); err != nil && !errors.Is(err, leadership.ErrNotLeader) {
			logger.Error(err, "Failed to release partition; it expires after the lease duration", "partition", p)
		}
		m.mu.Lock()
		delete(m.retiring, p)
		m.mu.Unlock()
		m.poke()
	}()
}

// taken reports whether partition p, handed over, has been taken since: by
// another pod, or by this one again. This pod's own name on a Lease it does
// not own is its release still on its way (the elector stops claiming before
// it clears the Lease), not a taker; nor is its own claim while a release
// has not returned: the elector may not have stopped claiming yet, and
// counting that as taken would hand the next partition over at once.
func (m *Member) taken(v view, p int) bool {
	owner := v.owners[p]
	return owner != "" && (owner != m.cfg.Identity || (slices.Contains(v.mine, p) && m.releasing == 0))
}

// view is what this pod sees of the group at one moment.
type view struct {
	// member: this pod holds its membership Lease.
	member bool
	// members are the live members' identities, sorted.
	members []string
	// effective is the group's effective N (EffectiveN).
	effective int
	// owners[i] is partition i's owner, "" if none, for i below this
	// pod's N.
	owners []string
	// mine are the partitions this pod owns, with their states; inRange
	// are those of them below the effective N.
	mine, inRange []int
	states        []leadership.State
	// target is this pod's fair share of the effective N under Targets.
	target int
	// sharing are the members the partitions are shared among (see
	// shareAmong); degraded says why, when not every unhealthy member
	// could give its partitions up.
	sharing  []string
	degraded string
	// needy are the members of sharing below the floor of the fair share,
	// sorted: those the free partitions are split among (FreeToTry).
	needy []string
}

// assess takes this pod's view of the group: every state is time-bounded,
// as each elector's own.
func (m *Member) assess() view {
	v := view{
		owners: make([]string, len(m.partitions)),
		states: make([]leadership.State, len(m.partitions)),
	}
	v.member = m.membership.Snapshot().IsLeader
	// One walk of the membership Leases for each member's N and its
	// app's health.
	labels := m.group.HolderLabelValues(memberPrefix(m.cfg.Name), PartitionsLabel, AppHealthyLabel)
	published := make([]string, 0, len(labels))
	unhealthy := map[string]bool{}
	for who, values := range labels {
		published = append(published, values[0])
		unhealthy[who] = values[1] == "false"
	}
	v.members = slices.Sorted(maps.Keys(labels))
	v.effective = EffectiveN(len(m.partitions), published)
	if v.member {
		v.members = insertSorted(v.members, m.cfg.Identity)
	}
	counts := map[string]int{}
	for i, e := range m.partitions {
		s := e.Snapshot()
		v.states[i] = s
		// Our own name without a valid claim (lapsed, being released, a
		// previous incarnation's) is neither ours nor free.
		v.owners[i] = s.Holder
		if s.IsLeader {
			v.mine = append(v.mine, i)
			if i < v.effective {
				v.inRange = append(v.inRange, i)
			}
		}
		// Every member counts the same partitions: those all of them run.
		if v.owners[i] != "" && i < v.effective {
			counts[v.owners[i]]++
		}
	}
	counts[m.cfg.Identity] = len(v.inRange)
	v.sharing, v.degraded = m.shareAmong(v, unhealthy)
	targets := Targets(v.effective, v.sharing, counts)
	v.target = targets[m.cfg.Identity]
	// Needy is below the floor of the fair share, not below the target:
	// which members get the n mod m larger targets depends on who owns the
	// most, which moves while partitions do, and members that disagreed
	// on it would disagree on the split of the free partitions. A member
	// that needs only its one more tries it as long free.
	floor, _ := FairShare(v.effective, len(v.sharing))
	for _, who := range v.sharing {
		if counts[who] < floor {
			v.needy = append(v.needy, who)
		}
	}
	if v.degraded != "" {
		// Every app is unhealthy: nothing moves. A member keeps what it
		// owns (no drain towards the even share the last healthy one
		// was above) and still takes free partitions up to its share.
		v.target = max(v.target, len(v.inRange))
	}
	return v
}

// shareAmong returns the members the partitions are shared among. With
// health gating, a member whose app is unhealthy (its membership Lease's
// AppHealthyLabel is "false": unhealthy; this pod asks its own probe) gets no share:
// its partitions drain to the healthy members, as a surplus does, and it
// takes them back once healthy. When no member is healthy, nothing moves
// (every member keeps its share) and the member reports why, degraded.
// A member without the label (no gating) counts as healthy. Every member
// reads the labels, gated or not, so that all compute the same shares in
// a group where some are gated (a rollout that turns gating on).
func (m *Member) shareAmong(v view, unhealthy map[string]bool) (sharing []string, degraded string) {
	own := true
	if m.cfg.AppHealth != nil {
		own, _ = m.cfg.AppHealth.Healthy()
	}
	for _, who := range v.members {
		healthy := !unhealthy[who]
		if who == m.cfg.Identity {
			healthy = own
		}
		if healthy {
			sharing = append(sharing, who)
		}
	}
	if len(sharing) == 0 && len(v.members) > 0 {
		// A fixed text: the probe's error changes from one failure to
		// the next, and each change would wake every long-poll.
		return v.members, "every member's app is unhealthy; the partitions stay where they are"
	}
	return sharing, ""
}

func insertSorted(sorted []string, s string) []string {
	for i, x := range sorted {
		if x == s {
			return sorted
		}
		if x > s {
			return append(sorted[:i], append([]string{s}, sorted[i:]...)...)
		}
	}
	return append(sorted, s)
}

// gate keeps the elector of partition i of this pod to its fair share and
// below the effective N.
type gate struct {
	m *Member
	i int
}

func (g gate) Admits() bool {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	return g.m.admitsLocked(g.i)
}

func (g gate) Admit() (func(), bool) {
	g.m.mu.Lock()
	defer g.m.mu.Unlock()
	if !g.m.admitsLocked(g.i) {
		return nil, false
	}
	g.m.admitted[g.i] = true
	return func() {
		g.m.mu.Lock()
		delete(g.m.admitted, g.i)
		g.m.mu.Unlock()
		g.m.poke()
	}, true
}

// takingLocked counts the partitions this pod owns below the effective N
// and the acquisitions on their way. An acquisition whose term the view
// already shows (its write is in the elector's state, its return not yet
// seen) counts once: counted twice, a member one short of its target was
// refused its last partition until the write returned and a reconcile
// nudged the elector.
func (m *Member) takingLocked(v view) int {
	n := len(v.inRange)
	for i := range m.admitted {
		if !slices.Contains(v.inRange, i) {
			n++
		}
	}
	return n
}

// admitsLocked: only a live member below its target, counting the
// acquisitions on their way, takes a partition, and only one below the
// group's effective N. An elector being stopped takes nothing: its stop and
// its admission are decided under the same lock, so an acquisition is
// either admitted before the stop (which then waits for it: stopIdleLocked)
// or refused, never written while its elector shuts down.
//
// A refusal is recorded: the elector then waits for client-go's next retry,
// unless a reconcile that wants the partition tells it to try now.
func (m *Member) admitsLocked(i int) bool {
	if r := m.runs[i]; r != nil && r.stopping {
		return false
	}
	v := m.assess()
	if v.member && i < v.effective && m.takingLocked(v) < v.target {
		return true
	}
	m.refused[i] = true
	return false
}
