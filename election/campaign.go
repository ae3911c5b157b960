package election

import (
	"context"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
)

// Campaign says when this pod tries to take the Lease.
type Campaign string

const (
	// CampaignAuto: always, except while sitting out after a release (plain
	// leader election).
	CampaignAuto Campaign = "auto"
	// CampaignManual: only while the app asks (Acquire). A term won that
	// way is renewed until it ends; the next needs the app to ask again.
	CampaignManual Campaign = "manual"
	// CampaignNever: an observer, which never writes the Lease; it follows
	// it and answers who leads.
	CampaignNever Campaign = "never"
)

// campaign admits this pod's new terms on the Lease: always (auto), only
// while an Acquire is on its way (manual), or never (observer). Like a Gate,
// it is asked before every new term's write (renewals are not asked), and it
// counts admitted writes on their way, so that an Acquire that gives up can
// wait for them to return and then answer the truth: a write admitted just
// before it gave up may still make this pod the leader.
type campaign struct {
	mode Campaign

	mu sync.Mutex
	// asking counts the Acquire calls on their way.
	asking int
	// inflight counts admitted writes on their way; idle is signalled when
	// it drops to zero.
	inflight int
	idle     *sync.Cond
}

func newCampaign(mode Campaign) *campaign {
	if mode == "" {
		mode = CampaignAuto
	}
	c := &campaign{mode: mode}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// Admits reports whether a new term would be admitted now. A nil campaign
// admits every term (auto).
func (c *campaign) Admits() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admitsLocked()
}

func (c *campaign) admitsLocked() bool {
	switch c.mode {
	case CampaignManual:
		return c.asking > 0
	case CampaignNever:
		return false
	default:
		return true
	}
}

// Admit admits one new term's write; done is called when it has returned.
func (c *campaign) Admit() (done func(), ok bool) {
	if c == nil {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.admitsLocked() {
		return nil, false
	}
	c.inflight++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.inflight--
		if c.inflight == 0 {
			c.idle.Broadcast()
		}
	}, true
}

// ask opens the campaign for one Acquire call.
func (c *campaign) ask() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asking++
}

// stopAsking closes what ask opened and waits until no admitted write is on
// its way, so that the caller then reads the outcome of every write its
// call admitted.
func (c *campaign) stopAsking() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asking--
	for c.inflight > 0 {
		c.idle.Wait()
	}
}

// Acquire makes this pod try to take the Lease now, and reports whether it
// leads when it returns (a pod that already leads answers true at once).
// While it runs, the pod campaigns: in manual mode that is the only time it
// does; in auto mode it also ends a sit-out after a release early. Losing
// to another holder is not an error. It returns ErrObserver on an observer,
// and ctx's error if ctx ends first.
func (e *Elector) Acquire(ctx context.Context, opts leadership.AcquireOptions) (leadership.State, bool, error) {
	if e.campaign.mode == CampaignNever {
		return e.Snapshot(), false, leadership.ErrObserver
	}
	if s := e.Snapshot(); s.IsLeader {
		return s, true, nil
	}
	e.campaign.ask()
	e.endSitOut()
	e.TryNow()
	if opts.Wait > 0 {
		waitCtx, cancel := context.WithTimeout(ctx, opts.Wait)
		e.waitLeader(waitCtx)
		cancel()
	} else {
		for i := range max(opts.Attempts, 1) {
			if i > 0 && e.waitLeaderFor(ctx, opts.RetryDelay) {
				break
			}
			if e.attempt1(ctx) || ctx.Err() != nil {
				break
			}
		}
	}
	e.campaign.stopAsking()
	s := e.Snapshot()
	if !s.IsLeader && ctx.Err() != nil {
		return s, false, ctx.Err()
	}
	return s, s.IsLeader, nil
}

// attempt1 is one attempt at the Lease: it returns true as soon as this pod
// leads, false as soon as the Lease is seen held by another live holder,
// and false when a write had time to return without making this pod the
// leader (refused, conflicting, or the API server not answering).
func (e *Elector) attempt1(ctx context.Context) bool {
	e.TryNow()
	// One write: the Lease client's request timeout is half the renew
	// deadline; a retry period on top covers client-go's start of a round.
	ctx, cancel := context.WithTimeout(ctx, e.cfg.RenewDeadline/2+e.cfg.RetryPeriod)
	defer cancel()
	for {
		s, changed := e.Watch()
		if s.IsLeader {
			return true
		}
		if e.tracker.contended() {
			return false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// waitLeader waits until this pod leads or ctx ends, and reports whether it
// leads.
func (e *Elector) waitLeader(ctx context.Context) bool {
	for {
		s, changed := e.Watch()
		if s.IsLeader {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// waitLeaderFor is waitLeader for at most d.
func (e *Elector) waitLeaderFor(ctx context.Context, d time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return e.waitLeader(ctx)
}

// endSitOut ends a sit-out after a release early (auto mode: an Acquire
// says the app wants to lead again).
func (e *Elector) endSitOut() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.releasing != nil {
		e.releasing.endSitOut()
	}
}

// sitOut is how long Release keeps this pod out of the election: one lease
// duration in auto mode, so that another pod takes over; none in manual
// mode, where the pod campaigns only when asked anyway.
func (e *Elector) sitOut() time.Duration {
	if e.campaign.mode == CampaignAuto {
		return e.cfg.LeaseDuration
	}
	return 0
}
