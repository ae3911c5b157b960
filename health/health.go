// Package health gates this pod's candidacy on its app's health: it probes
// the app (--app-health-url), keeps the elector from starting a term while
// the app is unhealthy, publishes this candidate's health in the election's
// candidates Lease ("<lease>-candidates") and reads everyone else's there,
// and makes a leader whose app turned unhealthy step down, but only when
// another candidate is healthy and able to take over. Otherwise the leader
// keeps leading and reports itself degraded, so that an outage of every
// app never makes leadership flap.
package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leadership"
)

// publishTimeout bounds the removal of this candidate's entry at shutdown.
const publishTimeout = 2 * time.Second

// refreshEvery is how often a candidate rewrites an entry that has not
// changed. Entries are written when they change, not as heartbeats: an idle
// follower costs a read and a write in refreshEvery (0.007 requests/s).
// Whether a candidate is alive is proven when it matters, at a handover, by
// its taking the Lease; the refresh only lets the entries of pods that died
// unseen be pruned, staleAfter after their last write.
const refreshEvery = 5 * time.Minute

// staleAfter is how long an entry no one has seen change is kept: three
// refreshes, so that one or two failed writes do not drop a live candidate.
const staleAfter = 3 * refreshEvery

// Config configures health gating.
type Config struct {
	// URL is the app's health endpoint: GET, 2xx is healthy.
	URL string
	// CheckPod makes a candidate read its own pod (Identity in Namespace)
	// before a new term and never start one once the pod is terminating
	// (ownPod). It needs get on pods.
	CheckPod bool
	// NameSuccessor, without a URL, keeps this candidate's entry in the
	// candidates Lease with no app to probe (always healthy), so that a
	// release names a successor, a crash takeover is ranked and
	// HandoverAfter works, without health gating. With a URL it is implied.
	NameSuccessor bool
	// Period is the time between probes; each probe times out after half
	// of it, so that probes never overlap.
	Period time.Duration
	// Failures consecutive failed probes make the app unhealthy, Successes
	// consecutive successful ones healthy again. The app starts unhealthy.
	Failures, Successes int
	// Namespace and Lease name the election's Lease; the candidates Lease
	// is Lease+CandidatesLeaseSuffix in the same namespace.
	Namespace, Lease string
	// Identity is this candidate's holder identity.
	Identity string
	// LeaseDuration is the election's: a step-down whose candidates have
	// not taken the Lease a lease duration later prunes them (see
	// checkTaken).
	LeaseDuration time.Duration
	// Client writes the candidates Lease, WatchClient watches it (the
	// election's two clients).
	Client, WatchClient kubernetes.Interface
	// Revision is this pod's revision (its pod-template-hash or
	// controller-revision-hash label), published in its entry: a release
	// names a successor of the newest revision (Successor). "" if unknown.
	Revision string
	// HandoverAfter, if positive, makes a leader of an older revision hand
	// over (reason handed-over) once a candidate of the newest revision
	// has been able to take over for this long: a rollout then moves
	// leadership once, to a new pod, before the old leader's pod is
	// deleted. 0 is off.
	HandoverAfter time.Duration
	// Clock is for tests; nil means the real clock.
	Clock clock.WithTicker
}

// Enabled reports whether health gating or the candidates Lease alone
// (NameSuccessor) is configured.
func (c Config) Enabled() bool { return c.URL != "" || c.NameSuccessor }

// CandidatesLease is the name of the candidates Lease.
func (c Config) CandidatesLease() string { return c.Lease + CandidatesLeaseSuffix }

// Elector is what health gating needs of the elector.
type Elector interface {
	Snapshot() leadership.State
	Watch() (leadership.State, <-chan struct{})
	StepDown(ctx context.Context, reason leadership.Reason) (leadership.State, error)
	SetDegraded(reason string)
	TryNow()
}

// Health probes the app and acts on its health. Its Gate goes into the
// election.Config; Run then needs the elector built from it.
type Health struct {
	cfg      Config
	clock    clock.WithTicker
	prober   prober
	registry *registry
	metrics  *metrics

	healthy atomic.Bool
	// ok is whether the last probe succeeded.
	ok atomic.Bool
	// kick asks the loop to decide again (registry or elector change).
	kick chan struct{}
	// publish asks the publisher to write this candidate's entry now.
	publish chan struct{}
	// probed is closed once the first probe has an answer: the first
	// write of the entry waits for it (publishLoop).
	probed     chan struct{}
	probedOnce sync.Once
	// steppingDown is set while a step-down is on its way.
	steppingDown atomic.Bool
	// newerSince is when the loop first saw a candidate of a newer
	// revision ready, zero if it does not (handoverDue; the loop's alone).
	newerSince time.Time
	// reclaim lets an unhealthy candidate take the Lease back after a
	// step-down no one took over from (checkTaken).
	reclaim atomic.Bool
	// pod tells whether this pod is terminating; nil unless CheckPod.
	pod *ownPod

	mu sync.Mutex
	th thresholds
	// lastErr is the last failed probe's error, for the degraded reason
	// and /readyz.
	lastErr error
	// failingSince is when the current run of failed probes began; zero
	// after a success.
	failingSince time.Time
	// handedTo is what the last step-down relied on, until someone is
	// seen to take over or checkTaken prunes it; nil for none.
	handedTo *stepDownWitness
}

// New returns health gating for cfg.
func New(cfg Config) (*Health, error) {
	if !cfg.Enabled() {
		return nil, errors.New("health: no URL, and no NameSuccessor")
	}
	if cfg.Period <= 0 || cfg.Failures < 1 || cfg.Successes < 1 || cfg.LeaseDuration <= 0 {
		return nil, errors.New("health: period, failures, successes and lease duration must be positive")
	}
	if cfg.Client == nil {
		return nil, errors.New("health: client must be set")
	}
	if cfg.WatchClient == nil {
		cfg.WatchClient = cfg.Client
	}
	clk := cfg.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	h := &Health{
		cfg:     cfg,
		clock:   clk,
		prober:  alwaysHealthy{},
		publish: make(chan struct{}, 1),
		probed:  make(chan struct{}),
		metrics: newMetrics(),
		kick:    make(chan struct{}, 1),
		th:      thresholds{failures: cfg.Failures, successes: cfg.Successes},
		lastErr: errors.New("the app has not answered its health probe yet"),
	}
	if cfg.URL != "" {
		h.prober = urlProber{url: cfg.URL, client: newProbeClient(cfg.Period / 2)}
	} else {
		// No app to ask: healthy from the start, so that the gate never
		// delays a campaign.
		h.healthy.Store(true)
		h.ok.Store(true)
		h.th.healthy = true
		h.lastErr = nil
	}
	if cfg.CheckPod && cfg.Identity != "" {
		h.pod = &ownPod{client: cfg.Client, namespace: cfg.Namespace, name: cfg.Identity}
	}
	h.registry = newRegistry(cfg.Namespace, cfg.CandidatesLease(), cfg.Identity, staleAfter, cfg.Client, cfg.WatchClient, clk, h.poke)
	h.registry.revision = cfg.Revision
	// Someone pruned this candidate's entry (it did not take a Lease in
	// time, or it was frozen): it writes it again.
	h.registry.ownMissing = h.requestPublish
	return h, nil
}

// poke asks the loop to decide again.
func (h *Health) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Gate keeps the elector from starting a term while the app is unhealthy
// (renewals of a running term are not asked: stepping down is Run's
// decision).
func (h *Health) Gate() election.Gate { return gate{h} }

type gate struct{ h *Health }

func (g gate) Admits() bool { return g.h.admits() && !g.h.pod.terminating() }

// Admit also reads this pod, unless that is settled (ownPod): a
// terminating pod never starts a term.
func (g gate) Admit() (func(), bool) {
	return func() {}, g.h.admits() && !g.h.pod.check(context.Background())
}

// admits: a healthy app, or a step-down no one took over from (reclaim).
func (h *Health) admits() bool { return h.healthy.Load() || h.reclaim.Load() }

// Ready fails while the app is unhealthy: /readyz adds it to every
// readiness mode.
func (h *Health) Ready() error {
	if h.healthy.Load() {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Errorf("the app is unhealthy: %v", h.lastErr)
}

// Collectors returns the health metrics; none without an app to probe
// (NameSuccessor alone): they would report a health no one measured.
func (h *Health) Collectors() []prometheus.Collector {
	if h.cfg.URL == "" {
		return nil
	}
	return h.metrics.collectors
}

// prober asks the app once.
type prober interface {
	probe(ctx context.Context) error
}

type urlProber struct {
	url    string
	client *http.Client
}

func (p urlProber) probe(ctx context.Context) error { return probe(ctx, p.client, p.url) }

// alwaysHealthy is the prober of NameSuccessor without a URL.
type alwaysHealthy struct{}

func (alwaysHealthy) probe(context.Context) error { return nil }

// Run probes the app and acts on its health until ctx ends; el is the
// elector built with Gate. At the end it removes this candidate's entry
// from the candidates Lease.
func (h *Health) Run(ctx context.Context, el Elector) error {
	logger := klog.FromContext(ctx).WithValues("candidatesLease", klog.KRef(h.cfg.Namespace, h.cfg.CandidatesLease()))
	ctx = klog.NewContext(ctx, logger)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { h.registry.run(ctx) })
	wg.Go(func() { h.publishLoop(ctx, el) })
	wg.Go(func() {
		_, changed := el.Watch()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			_, changed = el.Watch()
			h.poke()
		}
	})

	tick := h.clock.NewTicker(h.cfg.Period)
	defer tick.Stop()
	degraded := ""
	probeNow := true
	for {
		if probeNow {
			h.probeOnce(ctx, el)
		}
		h.checkTaken(ctx, el)
		d := decide(h.healthy.Load(), el.Snapshot().IsLeader, h.mayStepDown(), h.registry.healthyOthers(), h.probeError())
		if d.degraded != degraded {
			if d.degraded != "" && degraded == "" {
				logger.Info("Keeping leadership with an unhealthy app: no other candidate is healthy", "reason", d.degraded)
			} else if d.degraded == "" {
				logger.Info("No longer degraded")
			}
			degraded = d.degraded
			el.SetDegraded(degraded)
			h.metrics.setDegraded(degraded != "")
		}
		if !d.stepDown && h.handoverDue(el.Snapshot().IsLeader) && h.steppingDown.CompareAndSwap(false, true) {
			logger.Info("Handing over to a candidate of the newest revision", "successor", h.Successor(el.Snapshot().FencingToken))
			wg.Go(func() { h.stepDown(ctx, el, leadership.ReasonHandedOver) })
		}
		if d.stepDown && h.steppingDown.CompareAndSwap(false, true) {
			logger.Info("Stepping down: the app is unhealthy and another candidate is healthy", "healthyCandidates", h.registry.healthyOthers())
			wg.Go(func() { h.stepDown(ctx, el, leadership.ReasonAppUnhealthy) })
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
			probeNow = true
		case <-h.kick:
			// A registry or elector change: decide again, without a probe.
			probeNow = false
		}
	}
}

// stepDown makes the leader step down for reason; steppingDown was set.
func (h *Health) stepDown(ctx context.Context, el Elector, reason leadership.Reason) {
	defer h.steppingDown.Store(false)
	witness := h.witness(el.Snapshot().FencingToken)
	if _, err := el.StepDown(ctx, reason); err != nil {
		if !errors.Is(err, leadership.ErrNotLeader) && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Could not step down", "reason", reason)
		}
	} else {
		h.mu.Lock()
		h.handedTo = witness
		h.mu.Unlock()
	}
	h.poke()
}

// probeOnce asks the app and records the result.
func (h *Health) probeOnce(ctx context.Context, el Elector) {
	pctx, cancel := context.WithTimeout(ctx, h.cfg.Period/2)
	err := h.prober.probe(pctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	ok := err == nil
	h.metrics.observe(ok)
	defer h.probedOnce.Do(func() { close(h.probed) })
	h.mu.Lock()
	switch {
	case ok:
		h.failingSince = time.Time{}
	case h.failingSince.IsZero():
		h.failingSince = h.clock.Now()
	}
	if !ok {
		h.lastErr = err
	}
	changed := h.th.record(ok)
	healthy := h.th.healthy
	h.mu.Unlock()
	if h.ok.Swap(ok) != ok {
		h.requestPublish()
	}
	if !changed {
		return
	}
	h.healthy.Store(healthy)
	h.metrics.setHealthy(healthy)
	logger := klog.FromContext(ctx)
	if healthy {
		logger.Info("The app is healthy: campaigning")
		el.TryNow()
	} else {
		logger.Info("The app is unhealthy: not campaigning", "err", err)
	}
	h.requestPublish()
}

// requestPublish asks the publisher to write this candidate's entry now.
func (h *Health) requestPublish() {
	select {
	case h.publish <- struct{}{}:
	default:
	}
}

// stepDownGrace is how long after its first failed probe an unhealthy
// leader waits before it may step down: one period, so that every other
// candidate has probed its own app since (an outage of every app shows in
// their entries' ok first), plus half of one for that probe's timeout and
// its write to reach the leader. With --app-health-failures of 2 or more
// the thresholds already take that long; it adds a delay only with 1.
func (h *Health) stepDownGrace() time.Duration { return h.cfg.Period + h.cfg.Period/2 }

// mayStepDown reports whether the current run of failures is old enough
// for a step-down (stepDownGrace).
func (h *Health) mayStepDown() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failingSince.IsZero() && h.clock.Since(h.failingSince) >= h.stepDownGrace()
}

// probeError is the last probe's error.
func (h *Health) probeError() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastErr
}

// publishLoop writes this candidate's entry at once, on every change of
// its health, when someone pruned it, and every refreshEvery; a failed
// write is tried again a probe period later. When ctx ends it removes the
// entry.
func (h *Health) publishLoop(ctx context.Context, el Elector) {
	logger := klog.FromContext(ctx)
	failing := false
	// The first write waits for the first probe's answer (at most half a
	// period): written before it, the entry would say "unhealthy" and be
	// written again a moment later, one more write of the candidates Lease
	// and one more event for every candidate that watches it.
	select {
	case <-ctx.Done():
	case <-h.probed:
		// The probe asked for a write too; this one covers it.
		select {
		case <-h.publish:
		default:
		}
	}
	for ctx.Err() == nil {
		next := refreshEvery
		if err := h.registry.publish(ctx, entry{Healthy: h.healthy.Load(), OK: h.ok.Load()}, false); err != nil {
			if ctx.Err() != nil {
				break
			}
			if !failing {
				logger.Error(err, "Could not publish this candidate's health; other candidates do not count it as able to take over until it is written", "lease", h.registry.String())
			}
			failing = true
			next = min(h.cfg.Period, next)
		} else if failing {
			failing = false
			logger.Info("Published this candidate's health again", "lease", h.registry.String())
		}
		timer := h.clock.NewTimer(next)
		select {
		case <-ctx.Done():
		case <-timer.C():
		case <-h.publish:
		}
		timer.Stop()
		if ctx.Err() != nil {
			break
		}
	}
	wctx, cancelWait := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout/2)
	h.awaitSuccessor(wctx, el)
	cancelWait()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), publishTimeout)
	defer cancel()
	if err := h.registry.publish(rctx, entry{}, true); err != nil {
		logger.V(2).Info("Could not remove this candidate's entry; the others drop it once it is stale", "err", err)
	}
}

// awaitSuccessor waits, while ctx allows (half of publishTimeout at a
// shutdown: a successor takes within milliseconds, and the others only a
// retry period after the release), until the Lease names a holder
// other than this candidate, if it names none or this one: a leader that
// stops releases the Lease to its successor at that moment, and its entry
// leaving the candidates Lease is a write every candidate watches, the
// successor among them, so it comes after the take instead of beside it.
func (h *Health) awaitSuccessor(ctx context.Context, el Elector) {
	for {
		s, changed := el.Watch()
		if s.Holder != "" && s.Holder != h.cfg.Identity {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// decision is what a candidate does about its health now.
type decision struct {
	// stepDown: the leader hands over (its app is unhealthy and another
	// candidate is healthy).
	stepDown bool
	// degraded is the reason to report, "" for none.
	degraded string
}

// decide is the rule of health gating: only a leader whose app is unhealthy
// acts, and it steps down only when someone healthy can take over (and
// its failures are old enough for the others' entries to show an outage
// they share: mayStepDown); otherwise it keeps leading, degraded.
func decide(healthy, leading, mayStepDown bool, healthyOthers []string, probeErr error) decision {
	switch {
	case healthy || !leading:
		return decision{}
	case len(healthyOthers) > 0 && mayStepDown:
		return decision{stepDown: true}
	case len(healthyOthers) > 0:
		// Not yet: decided again at the next probe.
		return decision{}
	default:
		return decision{degraded: fmt.Sprintf("app unhealthy (%v); no healthy candidate to take over", probeErr)}
	}
}
