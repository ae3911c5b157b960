package main

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/invariant"
)

// observation is one answer to GET /leader.
type observation struct {
	who      string
	sent     time.Time
	received time.Time
	state    api.Leader
}

// candidate is one running process of an implementation.
type candidate struct {
	*harness.Candidate
	// user names it in the API server's audit log.
	user string
}

// group is the candidates of one implementation racing for one Lease, and
// the pollers that feed the monitor.
type group struct {
	opts *options
	cp   *cluster.ControlPlane
	im   *impl
	// lease is the Lease's name in namespace.
	lease string
	work  string
	mon   *invariant.Checker

	mu      sync.Mutex
	next    int
	members []*candidate
	latest  map[*candidate]observation
	// changed is closed (and replaced) on every observation, waking waiters.
	changed     chan struct{}
	pollCtx     context.Context
	stopPollers context.CancelFunc
	pollers     sync.WaitGroup
}

func newGroup(opts *options, cp *cluster.ControlPlane, im *impl, lease, work string) *group {
	return &group{
		opts:    opts,
		cp:      cp,
		im:      im,
		lease:   lease,
		work:    work,
		mon:     invariant.New(im.leaderElector),
		latest:  map[*candidate]observation{},
		changed: make(chan struct{}),
	}
}

// start starts a new candidate, with a new identity and its own service
// account, and waits until it answers GET /leader (GET /partitions in
// partition mode).
func (g *group) start(ctx context.Context) (*candidate, error) {
	g.mu.Lock()
	name := fmt.Sprintf("%s-%d", g.im.prefix, g.next)
	g.next++
	g.mu.Unlock()

	kubeconfig, err := g.cp.ServiceAccountKubeconfig(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	o := harness.CandidateOptions{
		Binary:     g.im.binary,
		Name:       name,
		Lease:      g.lease,
		Namespace:  namespace,
		Kubeconfig: kubeconfig,
		Timings:    harness.Timings{LeaseDuration: g.opts.LeaseDuration, RenewDeadline: g.opts.RenewDeadline, RetryPeriod: g.opts.RetryPeriod},
		// The baseline serves GET /leader only.
		NoProbeServer: !g.im.leaderElector,
		LogPath:       filepath.Join(g.work, name+".log"),
		HTTPClient: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second},
		},
	}
	if g.im.leaderElector {
		o.Args = append(o.Args, "-v=2")
	}
	if g.im.partitions > 0 {
		// The benchmark's members have no app to release a draining
		// partition: without --drain-timeout=0s every join would measure
		// the drain timeout, not the handover (docs/partitions.md).
		o.Args = append(o.Args, fmt.Sprintf("--partitions=%d", g.im.partitions), "--drain-timeout=0s")
		o.ServingPath = "/partitions"
	}
	h, err := harness.StartCandidate(ctx, o)
	if err != nil {
		return nil, err
	}
	c := &candidate{Candidate: h, user: "system:serviceaccount:" + namespace + ":" + name}
	go func() {
		<-c.Done()
		g.broadcast()
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members = append(g.members, c)
	if g.pollCtx != nil {
		g.pollers.Add(1)
		go g.poll(g.pollCtx, c)
	}
	return c, nil
}

// live returns the running candidates.
func (g *group) live() []*candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*candidate
	for _, c := range g.members {
		if c.Running() {
			out = append(out, c)
		}
	}
	return out
}

// startPolling asks every candidate, present and future, for its state every
// PollInterval and feeds the answers to the monitor.
func (g *group) startPolling() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pollCtx, g.stopPollers = context.WithCancel(context.Background())
	for _, c := range g.members {
		if c.Running() {
			g.pollers.Add(1)
			go g.poll(g.pollCtx, c)
		}
	}
}

// stopPolling stops every poller and waits for them.
func (g *group) stopPolling() {
	g.mu.Lock()
	stop := g.stopPollers
	g.pollCtx, g.stopPollers = nil, nil
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
	g.pollers.Wait()
}

func (g *group) poll(ctx context.Context, c *candidate) {
	defer g.pollers.Done()
	tick := time.NewTicker(g.opts.PollInterval)
	defer tick.Stop()
	for {
		sent := time.Now()
		s, err := c.API().Leader(ctx)
		if err == nil {
			o := observation{who: c.Name(), sent: sent, received: time.Now(), state: s}
			g.mon.Record(invariant.LeaderAnswer(o.who, o.sent, o.state))
			g.mu.Lock()
			g.latest[c] = o
			g.mu.Unlock()
			g.broadcast()
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-tick.C:
		}
	}
}

func (g *group) broadcast() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.changed)
	g.changed = make(chan struct{})
}

// waitUntil waits, woken by every observation and exit, until cond (called
// with g.mu held) is true.
func (g *group) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		ok, changed := cond(), g.changed
		g.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitLeaderAfter waits until a running candidate other than exclude answers
// isLeader to a request sent after `after`, and returns it with that answer.
// It needs the pollers running.
func (g *group) waitLeaderAfter(ctx context.Context, exclude *candidate, after time.Time, timeout time.Duration) (*candidate, observation, error) {
	var (
		leader *candidate
		answer observation
	)
	err := g.waitUntil(ctx, timeout, "a new leader", func() bool {
		for _, c := range g.members {
			o, ok := g.latest[c]
			if c != exclude && c.Running() && ok && o.state.IsLeader && o.sent.After(after) {
				leader, answer = c, o
				return true
			}
		}
		return false
	})
	return leader, answer, err
}

// waitLeader waits for a leader other than exclude.
func (g *group) waitLeader(ctx context.Context, exclude *candidate, timeout time.Duration) (*candidate, error) {
	c, _, err := g.waitLeaderAfter(ctx, exclude, time.Time{}, timeout)
	return c, err
}

// waitFollowing waits until every other running candidate names leader as
// the holder, so that a handover starts from a settled group.
func (g *group) waitFollowing(ctx context.Context, leader *candidate) error {
	settled := time.Now()
	return g.waitUntil(ctx, 10*time.Second+g.opts.RetryPeriod*2, "every candidate following "+leader.Name(), func() bool {
		for _, c := range g.members {
			if !c.Running() || c == leader {
				continue
			}
			o, ok := g.latest[c]
			if !ok || !o.sent.After(settled) || o.state.Holder != leader.Name() || o.state.IsLeader {
				return false
			}
		}
		return true
	})
}

// stopAll stops every candidate still running (SIGKILL) and waits for them.
func (g *group) stopAll() {
	g.stopPolling()
	for _, c := range g.live() {
		c.Kill()
	}
}
