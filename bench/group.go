package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

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

// group is the candidates of one implementation racing for one Lease (a
// harness.Group), and the pollers that feed the monitor.
type group struct {
	harness.Group[*candidate]
	opts *options
	cp   *cluster.ControlPlane
	im   *impl
	// lease is the Lease's name in namespace.
	lease string
	work  string
	mon   *invariant.Checker

	mu     sync.Mutex
	next   int
	latest map[*candidate]observation
	// changed is closed (and replaced) on every observation, waking waiters.
	changed     chan struct{}
	pollCtx     context.Context
	stopPollers context.CancelFunc
	pollers     sync.WaitGroup

	// toAnswer and toElection are, for each candidate started (leader
	// election only), the time from before its process was started to its
	// first answer on GET /leader and to the first answer that names a
	// holder (the election it reports).
	toAnswer, toElection []time.Duration
	// healthURL, if set, is the app health URL every candidate is given
	// (--health-gating).
	healthURL string
	// crashing is set during the crash rounds: a candidate started while
	// the Lease's holder is dead names no holder until the takeover (the
	// sidecar cannot know the holder is alive; client-go's names it), so
	// these starts are not timed.
	crashing bool
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

// gateOnHealth gives the group's candidates health gating: an app health
// endpoint that is always healthy, and the candidates Lease that health
// gating needs (the sidecar may not create it, as in a cluster where the
// chart creates it). stop ends the endpoint.
func (g *group) gateOnHealth(ctx context.Context) (stop func(), err error) {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: g.lease + "-candidates", Namespace: namespace}}
	if _, err := g.cp.AdminClient().CoordinationV1().Leases(namespace).Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create the candidates Lease: %w", err)
	}
	// Bench code, never shipped: httptest serves the endpoint in a line.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	g.healthURL = srv.URL + "/healthz"
	return srv.Close, nil
}

// waitElection polls c's GET /leader every millisecond until it names a
// holder.
func (g *group) waitElection(ctx context.Context, c *candidate) error {
	err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 2*g.opts.LeaseDuration+30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.API().Leader(ctx)
		return err == nil && l.Holder != "", nil
	})
	if err != nil {
		return fmt.Errorf("%s reported no holder of the Lease (log: %s): %w", c.Name(), c.LogPath(), err)
	}
	return nil
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
	if g.healthURL != "" {
		o.Args = append(o.Args, "--app-health-url="+g.healthURL)
	}
	if g.im.partitions > 0 {
		// The benchmark's members have no app to release a draining
		// partition: with a drain timeout every join measures it, not the
		// handover (docs/partitions.md); --partition-drain-timeout
		// chooses (0s by default).
		o.Args = append(o.Args, fmt.Sprintf("--partitions=%d", g.im.partitions), fmt.Sprintf("--drain-timeout=%v", g.opts.PartitionDrainTimeout))
		o.ServingPath = "/partitions"
	}
	started := time.Now()
	h, err := harness.StartCandidate(ctx, o)
	if err != nil {
		return nil, err
	}
	answered := time.Since(started)
	c := &candidate{Candidate: h, user: "system:serviceaccount:" + namespace + ":" + name}
	g.mu.Lock()
	timed := g.im.partitions == 0 && !g.crashing
	g.mu.Unlock()
	if timed {
		if err := g.waitElection(ctx, c); err != nil {
			c.Kill()
			return nil, err
		}
		elected := time.Since(started)
		g.mu.Lock()
		g.toAnswer = append(g.toAnswer, answered)
		g.toElection = append(g.toElection, elected)
		g.mu.Unlock()
	}
	go func() {
		<-c.Done()
		g.broadcast()
	}()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.Add(c)
	if g.pollCtx != nil {
		g.pollers.Add(1)
		go g.poll(g.pollCtx, c)
	}
	return c, nil
}

// startPolling asks every candidate, present and future, for its state every
// PollInterval and feeds the answers to the monitor.
func (g *group) startPolling() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pollCtx, g.stopPollers = context.WithCancel(context.Background())
	for _, c := range g.Live() {
		g.pollers.Add(1)
		go g.poll(g.pollCtx, c)
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

// observeLeader waits until the pollers observe a running candidate other
// than exclude answering isLeader to a request sent after `after`, and
// returns it with that answer. Unlike Group.WaitLeader it asks nothing
// itself: a handover is timed by the monitor's own observations.
func (g *group) observeLeader(ctx context.Context, exclude *candidate, after time.Time, timeout time.Duration) (*candidate, observation, error) {
	var (
		leader *candidate
		answer observation
	)
	err := g.waitUntil(ctx, timeout, "a new leader", func() bool {
		for _, c := range g.Members() {
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

// settleBound bounds how long the others take to follow a new leader
// (Group.WaitFollowing), so that a handover starts from a settled group.
func (g *group) settleBound() time.Duration { return 10*time.Second + g.opts.RetryPeriod*2 }

// stopAll stops every candidate still running (SIGKILL) and waits for them.
func (g *group) stopAll() {
	g.stopPolling()
	g.KillAll()
}
