package main

import (
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/invariant"

	"context"
	"fmt"
	"syscall"
	"time"
)

// exitTimeout bounds how long a candidate may take to exit after SIGTERM
// (release within a second, then a graceful HTTP shutdown) or SIGKILL.
const exitTimeout = 15 * time.Second

// currentLeader waits for a fresh "isLeader: true" answer and for every
// other candidate to follow that leader.
func currentLeader(ctx context.Context, opts *options, g *group) (*candidate, error) {
	leader, _, err := g.observeLeader(ctx, nil, time.Now(), opts.LeaseDuration+10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := g.WaitFollowing(ctx, g.settleBound(), leader); err != nil {
		return nil, err
	}
	return leader, nil
}

// handoverSpacing is the least time between two rounds' SIGTERMs.
const handoverSpacing = 1100 * time.Millisecond

// handovers stops the leader with SIGTERM, round after round, and measures
// the time until another candidate answers isLeader: true. Each round starts
// a replacement so that the group keeps its size.
func handovers(ctx context.Context, opts *options, g *group, history *leaseHistory, res *implResult) error {
	var previous time.Time
	sseCtx, stopSSE := context.WithCancel(ctx)
	defer stopSSE()
	sse := &sseStreams{opts: opts, g: g, streaming: map[*candidate]bool{}}
	for round := 1; round <= opts.Handovers; round++ {
		leader, err := currentLeader(ctx, opts, g)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if err := sse.attach(sseCtx, leader); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		// Pacing, not synchronisation: leader-elector starts at most one
		// term a second, sustained, beyond a burst of a lease duration (the
		// token clock, docs/safety.md); rounds closer than that would
		// measure that rate, not a handover. Both implementations get the
		// same pacing.
		if wait := time.Until(previous.Add(handoverSpacing)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		if previous, err = handover(ctx, opts, g, history, res, round, leader); err != nil {
			return err
		}
		if _, err := g.start(ctx); err != nil {
			return err
		}
	}
	return sse.measure(sseCtx, res)
}

// handover is one round: SIGTERM to leader, the time until another answers
// isLeader: true, the leader's exit, and whether it released the Lease
// first. It returns when the SIGTERM was sent.
func handover(ctx context.Context, opts *options, g *group, history *leaseHistory, res *implResult, round int, leader *candidate) (time.Time, error) {
	from := history.len()
	sent := time.Now()
	if err := leader.Signal(syscall.SIGTERM); err != nil {
		return sent, err
	}
	next, answer, err := g.observeLeader(ctx, leader, sent, opts.LeaseDuration+10*time.Second)
	if err != nil {
		return sent, fmt.Errorf("round %d: after SIGTERM to %s: %w", round, leader.Name(), err)
	}
	took := answer.received.Sub(sent)
	res.handovers = append(res.handovers, took)

	code, err := leader.WaitExit(ctx, exitTimeout)
	if err != nil {
		return sent, fmt.Errorf("round %d: %w", round, err)
	}
	if code != 0 {
		res.badExits = append(res.badExits, fmt.Sprintf("%s exited %d after SIGTERM (log: %s)", leader.Name(), code, leader.LogPath()))
	}
	records, err := history.waitFor(ctx, from, 10*time.Second, "holder "+next.Name(), func(r leaseRecord) bool { return r.holder == next.Name() })
	if err != nil {
		return sent, fmt.Errorf("round %d: %w", round, err)
	}
	released := false
	for _, r := range records[from:] {
		released = released || r.holder == ""
	}
	if released {
		res.released++
	}
	res.handoverRequests = append(res.handoverRequests, windowRequests{from: sent, to: time.Now()})
	logf("%s handover %d/%d: %s → %s, answers isLeader %v after SIGTERM (released: %v, exit %d)",
		g.im.key, round, opts.Handovers, leader.Name(), next.Name(), ms(took), released, code)
	return sent, nil
}

// sseStreams attaches the handover rounds' /events streams: with
// HandoverSSE, every leader-elector candidate present at a round has that
// many streams attached (HandoverSSEOne: one candidate at a time, a
// follower when it gets them, which may then lead and leave); a stream
// ends with its candidate, or with the context it was attached with.
type sseStreams struct {
	opts      *options
	g         *group
	streaming map[*candidate]bool
}

// attach attaches streams to the candidates that need them; leader is
// passed over in HandoverSSEOne.
func (s *sseStreams) attach(ctx context.Context, leader *candidate) error {
	if s.opts.HandoverSSE == 0 || !s.g.im.leaderElector {
		return nil
	}
	live := s.g.Live()
	if s.opts.HandoverSSEOne {
		for _, c := range live {
			if s.streaming[c] {
				return nil
			}
		}
	}
	for _, c := range live {
		if s.opts.HandoverSSEOne && c == leader {
			continue
		}
		if !s.streaming[c] {
			s.streaming[c] = true
			if err := attachSSE(ctx, c.APIURL()+"/events", s.opts.HandoverSSE); err != nil {
				return fmt.Errorf("%s: %w", c.Name(), err)
			}
			if s.opts.HandoverSSEOne {
				return nil
			}
		}
	}
	return nil
}

// measure reads, if streams were attached, each live candidate's memory
// with its streams (attaching them to the last round's replacement first).
func (s *sseStreams) measure(ctx context.Context, res *implResult) error {
	if len(s.streaming) == 0 {
		return nil
	}
	if err := s.attach(ctx, nil); err != nil {
		return err
	}
	for _, c := range s.g.Live() {
		m, err := residentMemory(c.Pid())
		if err != nil {
			return err
		}
		res.sseMem = append(res.sseMem, m)
		rt, err := harness.RuntimeMetrics(ctx, c.HTTPClient(), c.ProbeURL()+"/metrics")
		if err != nil {
			return err
		}
		res.sseRuntime = append(res.sseRuntime, rt)
	}
	return nil
}

// crashes kills the leader with SIGKILL, round after round, and measures,
// from the Lease's history, the time from the old leader's last renewal
// (renewTime) to the new holder's acquireTime; it also counts acquisitions
// before the old leader's Lease had run out (renewTime + lease duration).
func crashes(ctx context.Context, opts *options, g *group, history *leaseHistory, res *implResult) error {
	g.mu.Lock()
	g.crashing = true
	g.mu.Unlock()
	for round := 1; round <= opts.Crashes; round++ {
		leader, err := currentLeader(ctx, opts, g)
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		from := history.len()
		killed := time.Now()
		if err := leader.Signal(syscall.SIGKILL); err != nil {
			return err
		}
		if _, err := leader.WaitExit(ctx, exitTimeout); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		bound := opts.LeaseDuration + 3*opts.RetryPeriod + 10*time.Second
		next, answer, err := g.observeLeader(ctx, leader, killed, bound)
		if err != nil {
			return fmt.Errorf("round %d: after SIGKILL of %s: %w", round, leader.Name(), err)
		}
		records, err := history.waitFor(ctx, from, 10*time.Second, "holder "+next.Name(), func(r leaseRecord) bool { return r.holder == next.Name() })
		if err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		res.crashRequests = append(res.crashRequests, windowRequests{from: killed, to: time.Now()})
		acquired := records[len(records)-1]
		var lastRenew time.Time
		for i := len(records) - 2; i >= 0; i-- {
			if records[i].holder == leader.Name() {
				lastRenew = records[i].renewTime
				break
			}
		}
		if lastRenew.IsZero() {
			return fmt.Errorf("round %d: the Lease history has no renewal by %s", round, leader.Name())
		}
		failover := acquired.acquireTime.Sub(lastRenew)
		res.failovers = append(res.failovers, failover)
		res.killToAnswer = append(res.killToAnswer, answer.received.Sub(killed))
		if expiry := lastRenew.Add(opts.LeaseDuration); acquired.acquireTime.Before(expiry) {
			res.early = append(res.early, fmt.Sprintf("%s acquired at %s, %v before %s's Lease ran out (last renewal %s)",
				next.Name(), invariant.Stamp(acquired.acquireTime), expiry.Sub(acquired.acquireTime), leader.Name(), invariant.Stamp(lastRenew)))
		}
		logf("%s crash %d/%d: %s killed; %s acquired %v after the last renewal (kill → answers isLeader: %v)",
			g.im.key, round, opts.Crashes, leader.Name(), next.Name(), ms(failover), ms(answer.received.Sub(killed)))
		if _, err := g.start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// idleResult is what the idle phase measured.
type idleResult struct {
	from, to  time.Time
	leader    *candidate
	followers []*candidate
	// cpu is in millicores over the window; mem at its end.
	cpu map[*candidate]float64
	mem map[*candidate]memory
	// runtime is each leader-elector candidate's Go runtime gauges
	// (harness.RuntimeGauges) at the window's end.
	runtime map[*candidate]map[string]float64
	// leaseMetric is the growth of apiserver_request_total{resource="leases"}
	// over the window: every client's Lease requests, the API server's own
	// included.
	leaseMetric float64
	// requests counts each candidate's audited requests in the window, by
	// "verb resource".
	requests map[*candidate]map[string]int
	// machineCores is how busy the whole machine was during the window.
	machineCores float64
}

func (r idleResult) seconds() float64 { return r.to.Sub(r.from).Seconds() }

// rate is a candidate's audited API requests per second.
func (r idleResult) rate(c *candidate) float64 {
	n := 0
	for _, v := range r.requests[c] {
		n += v
	}
	return float64(n) / r.seconds()
}

// idle lets the group sit, without polling it, and measures each
// candidate's CPU, memory and API requests over IdleWindow.
func idle(ctx context.Context, opts *options, g *group, res *implResult) error {
	leader, followers, err := roles(ctx, g)
	if err != nil {
		return err
	}
	logf("%s idle: %s leads, %d followers; settling %v, then measuring %v", g.im.key, leader.Name(), len(followers), opts.IdleWarmup, opts.IdleWindow)
	if err := pause(ctx, opts.IdleWarmup); err != nil {
		return err
	}
	members := append([]*candidate{leader}, followers...)
	metric0, err := leaseRequestTotal(ctx, g.cp)
	if err != nil {
		return err
	}
	ticks0 := map[*candidate]uint64{}
	for _, c := range members {
		if ticks0[c], err = cpuTicks(c.Pid()); err != nil {
			return err
		}
	}
	busy0, err := machineBusyTicks()
	if err != nil {
		return err
	}
	from := time.Now()
	if err := pause(ctx, opts.IdleWindow); err != nil {
		return err
	}
	to := time.Now()
	busy1, err := machineBusyTicks()
	if err != nil {
		return err
	}
	r := idleResult{from: from, to: to, leader: leader, followers: followers, cpu: map[*candidate]float64{}, mem: map[*candidate]memory{}, runtime: map[*candidate]map[string]float64{},
		machineCores: float64(busy1-busy0) / clockTicksPerSecond / to.Sub(from).Seconds()}
	for _, c := range members {
		ticks, err := cpuTicks(c.Pid())
		if err != nil {
			return err
		}
		r.cpu[c] = float64(ticks-ticks0[c]) / clockTicksPerSecond / to.Sub(from).Seconds() * 1000
		if r.mem[c], err = residentMemory(c.Pid()); err != nil {
			return err
		}
		if g.im.leaderElector {
			// Read after the memory, so that the scrape is not in it.
			if r.runtime[c], err = harness.RuntimeMetrics(ctx, c.HTTPClient(), c.ProbeURL()+"/metrics"); err != nil {
				return err
			}
		}
	}
	metric1, err := leaseRequestTotal(ctx, g.cp)
	if err != nil {
		return err
	}
	r.leaseMetric = metric1 - metric0
	after, _, err := roles(ctx, g)
	if err != nil {
		return err
	}
	if after != leader {
		return fmt.Errorf("leadership moved from %s to %s while idle", leader.Name(), after.Name())
	}
	res.idle = r
	return nil
}

// roles asks every running candidate once and returns the leader and the
// followers.
func roles(ctx context.Context, g *group) (*candidate, []*candidate, error) {
	var (
		leader    *candidate
		followers []*candidate
	)
	for _, c := range g.Live() {
		s, err := c.API().Leader(ctx)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case s.IsLeader && leader != nil:
			return nil, nil, fmt.Errorf("both %s and %s answer isLeader", leader.Name(), c.Name())
		case s.IsLeader:
			leader = c
		default:
			followers = append(followers, c)
		}
	}
	if leader == nil {
		return nil, nil, fmt.Errorf("no candidate answers isLeader")
	}
	return leader, followers, nil
}

// pause lets d pass: a measurement window or a settling time, not a
// synchronisation.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
