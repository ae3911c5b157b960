package proxy

import (
	"bufio"
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leadership/leadershiptest"
)

func baseConfig() Config {
	return Config{Wait: testWait, MaxConnections: 64}
}

// TestForwardsToTheLeadersApp: through the leader's proxy and through a
// follower's, the answer is the leader's app's; the follower forwards to
// the leader (one peer connection), the leader to its app.
func TestForwardsToTheLeadersApp(t *testing.T) {
	c := newCluster(t, baseConfig(), "a", "b")
	c.lead("a", 1)
	for _, via := range []string{"a", "b"} {
		conn, r := c.dial(t, via)
		if got, err := ask(conn, r, schedulingSlack); err != nil || got != "a" {
			t.Fatalf("through %s: answer %q, %v; want a", via, got, err)
		}
	}
	a, b := c.pods["a"], c.pods["b"]
	if got := b.dialer.count(net.JoinHostPort(a.ip, c.peerPort)); got != 1 {
		t.Errorf("b dialed a's peer port %d times, want 1", got)
	}
	if got := testutil.ToFloat64(b.proxy.metrics.forwarded.WithLabelValues(forwardedLeader)); got != 1 {
		t.Errorf("b forwarded %v to the leader, want 1", got)
	}
	if got := testutil.ToFloat64(a.proxy.metrics.forwarded.WithLabelValues(forwardedLocal)); got != 2 {
		t.Errorf("a forwarded %v to its app, want 2", got)
	}
	if got := b.app.accepted.Load(); got != 0 {
		t.Errorf("the follower's app got %d connections", got)
	}
}

// TestNoLeaderWaitsThenCloses: with no leader, a connection waits the
// configured wait, not less, then is closed; one that a leader arrives
// for in time is forwarded.
func TestNoLeaderWaitsThenCloses(t *testing.T) {
	c := newCluster(t, baseConfig(), "a", "b")
	start := time.Now()
	conn, r := c.dial(t, "a")
	closed := waitClosed(t, conn, r, testWait+schedulingSlack)
	if waited := closed.Sub(start); waited < testWait {
		t.Errorf("closed after %v, before the wait (%v)", waited, testWait)
	}
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.refused.WithLabelValues(refusedNoLeader)); got != 1 {
		t.Errorf("refused no_leader = %v, want 1", got)
	}

	conn, r = c.dial(t, "a")
	time.Sleep(testWait / 4)
	c.lead("b", 2)
	if got, err := ask(conn, r, testWait+schedulingSlack); err != nil || got != "b" {
		t.Fatalf("answer %q, %v; want b", got, err)
	}
}

// TestRouteChangeEndsAHungAttempt: a follower connecting to a leader whose
// peer port accepts but never answers (a pod going away, a silent address)
// moves to the next leader as soon as its view changes, not at the end of
// its wait.
func TestRouteChangeEndsAHungAttempt(t *testing.T) {
	cfg := baseConfig()
	cfg.Wait = 10 * time.Second // far beyond the bound below: the old behaviour fails it
	c := newCluster(t, cfg, "a", "b")
	// "gone" is a holder whose peer port takes connections (the kernel's
	// backlog) and never says peerAccepted.
	silent, err := net.Listen("tcp", "127.0.0.9:"+c.peerPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Close() })
	c.resolver["gone"] = "127.0.0.9"
	c.lead("gone", 1)
	conn, r := c.dial(t, "b")
	// Let b's attempt reach the silent peer port before the view changes.
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, schedulingSlack, true, func(context.Context) (bool, error) {
		return c.pods["b"].dialer.count(net.JoinHostPort("127.0.0.9", c.peerPort)) > 0, nil
	}); err != nil {
		t.Fatal("b never dialed the silent leader")
	}
	changed := time.Now()
	c.lead("a", 2)
	if got, err := ask(conn, r, 2*schedulingSlack); err != nil || got != "a" {
		t.Fatalf("answer %q, %v after %v; want a within %v of the change", got, err, time.Since(changed), 2*schedulingSlack)
	}
	if got := testutil.ToFloat64(c.pods["b"].proxy.metrics.refused.WithLabelValues(refusedUnreachable)); got != 0 {
		t.Errorf("refused unreachable = %v, want 0", got)
	}
}

// TestStopLeadingClosesItsConnections: when the leader stops leading, the
// connection forwarded to its app and the one a follower forwarded to it
// are closed, on both sides; new connections reach the new leader.
func TestStopLeadingClosesItsConnections(t *testing.T) {
	c := newCluster(t, baseConfig(), "a", "b", "c")
	c.lead("a", 1)
	direct, dr := c.dial(t, "a")
	viaB, br := c.dial(t, "b")
	for _, x := range []struct {
		conn net.Conn
		r    *bufio.Reader
	}{{direct, dr}, {viaB, br}} {
		if got, err := ask(x.conn, x.r, schedulingSlack); err != nil || got != "a" {
			t.Fatalf("answer %q, %v; want a", got, err)
		}
	}
	c.lead("c", 2)
	waitClosed(t, direct, dr, schedulingSlack)
	waitClosed(t, viaB, br, schedulingSlack)
	deadline := time.Now().Add(schedulingSlack)
	for c.pods["a"].app.open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a's app still has %d connections open after it stopped leading", c.pods["a"].app.open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, r := c.dial(t, "b")
	if got, err := ask(conn, r, schedulingSlack); err != nil || got != "c" {
		t.Fatalf("after the change: answer %q, %v; want c", got, err)
	}
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.closedOnChange); got != 2 {
		t.Errorf("a closed %v connections on the change, want 2 (its client's and b's)", got)
	}
}

// quiesceConfig has a drain, and a wait longer than it (Validate).
func quiesceConfig() Config {
	cfg := baseConfig()
	cfg.Drain, cfg.Wait = time.Second, 3*time.Second
	return cfg
}

// quiesce runs a's Quiesce of term token in the background; the channel
// is closed when it returns.
func (c *cluster) quiesce(name string, token int64) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.pods[name].proxy.Quiesce(context.Background(), token)
	}()
	return done
}

// TestQuiesceLetsConnectionsEnd: during a graceful end of a's term, the
// connections it had forwarded (its own client's and b's) still reach a's
// app, new ones wait; Quiesce returns as soon as the old ones have ended,
// before the drain; the new ones then reach the next leader.
func TestQuiesceLetsConnectionsEnd(t *testing.T) {
	c := newCluster(t, quiesceConfig(), "a", "b", "c")
	c.lead("a", 1)
	direct, dr := c.dial(t, "a")
	viaB, br := c.dial(t, "b")
	for _, r := range []struct {
		conn net.Conn
		r    *bufio.Reader
	}{{direct, dr}, {viaB, br}} {
		if got, err := ask(r.conn, r.r, schedulingSlack); err != nil || got != "a" {
			t.Fatalf("answer %q, %v; want a", got, err)
		}
	}
	began := time.Now()
	done := c.quiesce("a", 1)
	waiting, wr := c.dial(t, "c")
	if got, err := ask(direct, dr, schedulingSlack); err != nil || got != "a" {
		t.Fatalf("during the drain, the old connection: answer %q, %v; want a", got, err)
	}
	_ = direct.Close()
	_ = viaB.Close()
	select {
	case <-done:
	case <-time.After(time.Second):
		t.Fatal("Quiesce did not return once the term's connections had ended")
	}
	if took := time.Since(began); took >= time.Second {
		t.Errorf("Quiesce took %v, the whole drain", took)
	}
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.drains.WithLabelValues(drainEnded)); got != 1 {
		t.Errorf("drains ended = %v, want 1", got)
	}
	if got := c.pods["a"].app.accepted.Load(); got != 2 {
		t.Errorf("a's app accepted %d connections, want 2: the one that arrived during the drain must wait for the next leader", got)
	}
	c.lead("b", 2)
	if got, err := ask(waiting, wr, schedulingSlack); err != nil || got != "b" {
		t.Fatalf("the connection that waited: answer %q, %v; want b", got, err)
	}
}

// TestQuiesceResumed: a quiesce that no release follows is undone: the
// connection that waited meanwhile, and new ones, reach the app again.
func TestQuiesceResumed(t *testing.T) {
	c := newCluster(t, quiesceConfig(), "a", "b")
	c.lead("a", 1)
	first, fr := c.dial(t, "a") // a answers: its proxy has seen its term
	if got, err := ask(first, fr, schedulingSlack); err != nil || got != "a" {
		t.Fatalf("answer %q, %v; want a", got, err)
	}
	_ = first.Close()
	resume := c.pods["a"].proxy.Quiesce(context.Background(), 1)
	waiting, wr := c.dial(t, "b")
	_ = waiting.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if got, err := ask(waiting, wr, 200*time.Millisecond); err == nil {
		t.Fatalf("a connection was forwarded to a quiescing leader: %q", got)
	}
	_ = waiting.SetDeadline(time.Time{})
	resume()
	for _, via := range []string{"a", "b"} {
		conn, r := c.dial(t, via)
		if got, err := ask(conn, r, schedulingSlack); err != nil || got != "a" {
			t.Fatalf("after resume, through %s: answer %q, %v; want a", via, got, err)
		}
	}
}

// TestQuiesceEndsWithTheTerm: a term that ends during the drain (it was
// lost, or another release ended it) ends the wait at once.
func TestQuiesceEndsWithTheTerm(t *testing.T) {
	c := newCluster(t, quiesceConfig(), "a", "b")
	c.lead("a", 1)
	conn, r := c.dial(t, "a")
	if got, err := ask(conn, r, schedulingSlack); err != nil || got != "a" {
		t.Fatalf("answer %q, %v", got, err)
	}
	done := c.quiesce("a", 1)
	time.Sleep(100 * time.Millisecond)
	ended := time.Now()
	c.lead("b", 2)
	select {
	case <-done:
	case <-time.After(time.Second - 100*time.Millisecond):
		t.Fatal("Quiesce waited out the drain after the term had ended")
	}
	if took := time.Since(ended); took > schedulingSlack {
		t.Errorf("Quiesce returned %v after the term ended", took)
	}
	waitClosed(t, conn, r, schedulingSlack)
}

// TestQuiesceCutsAtTheDrain: a connection that stays open makes Quiesce
// return after the drain, not before, and is closed then, before the term
// ends. Quiesce of a term this pod does not lead returns at once.
func TestQuiesceCutsAtTheDrain(t *testing.T) {
	cfg := quiesceConfig()
	c := newCluster(t, cfg, "a", "b")
	c.lead("a", 1)
	select {
	case <-c.quiesce("a", 7):
	case <-time.After(schedulingSlack):
		t.Fatal("Quiesce of another term did not return at once")
	}
	conn, r := c.dial(t, "a")
	if got, err := ask(conn, r, schedulingSlack); err != nil || got != "a" {
		t.Fatalf("answer %q, %v", got, err)
	}
	began := time.Now()
	<-c.quiesce("a", 1)
	if took := time.Since(began); took < cfg.Drain || took > cfg.Drain+schedulingSlack {
		t.Errorf("Quiesce returned after %v, want the drain (%v)", took, cfg.Drain)
	}
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.drains.WithLabelValues(drainCut)); got != 1 {
		t.Errorf("drains cut = %v, want 1", got)
	}
	// Closed at the drain's end, while the term still goes on: nothing of
	// it may reach the app once the claim stops.
	waitClosed(t, conn, r, schedulingSlack)
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.closedOnChange); got != 1 {
		t.Errorf("closed %v connections at the drain's end, want 1", got)
	}
}

// TestConflictingViewsNeverLoop: a thinks b leads, b thinks a leads (views
// that disagree during a change). A connection to a goes to b's peer
// port, which refuses it: b does not lead and never forwards further. The
// client is closed after the wait; b dialed nothing at all.
func TestConflictingViewsNeverLoop(t *testing.T) {
	c := newCluster(t, baseConfig(), "a", "b")
	c.pods["a"].source.Set(func(s *leadershipState) { s.Holder, s.FencingToken = "b", 1 })
	c.pods["b"].source.Set(func(s *leadershipState) { s.Holder, s.FencingToken = "a", 1 })
	conn, r := c.dial(t, "a")
	waitClosed(t, conn, r, testWait+schedulingSlack)
	a, b := c.pods["a"], c.pods["b"]
	if got := b.dialer.total(); got != 0 {
		t.Errorf("b, which does not lead, dialed %d times: a connection took a second hop", got)
	}
	dials := a.dialer.count(net.JoinHostPort(b.ip, c.peerPort))
	if dials < 1 {
		t.Errorf("a never dialed b's peer port")
	}
	if got := testutil.ToFloat64(b.proxy.metrics.refused.WithLabelValues(refusedNotLeader)); int(got) != dials {
		t.Errorf("b refused %v peer connections as not the leader, want every one of a's %d", got, dials)
	}
	if got := a.app.accepted.Load() + b.app.accepted.Load(); got != 0 {
		t.Errorf("the apps got %d connections", got)
	}
}

// TestUpstreamThatRefusesIsBoundedAndLogged: a leader whose app does not
// listen closes the client after the wait and counts it; so does a
// follower whose leader's proxy is unreachable.
func TestUpstreamThatRefusesIsBoundedAndLogged(t *testing.T) {
	c := newCluster(t, baseConfig(), "a", "b")
	_ = c.pods["a"].app.l.Close()
	c.lead("a", 1)
	for _, via := range []string{"a", "b"} {
		conn, r := c.dial(t, via)
		start := time.Now()
		closed := waitClosed(t, conn, r, testWait+schedulingSlack)
		if closed.Sub(start) > testWait+schedulingSlack {
			t.Errorf("through %s: closed after %v", via, closed.Sub(start))
		}
		if got := testutil.ToFloat64(c.pods[via].proxy.metrics.refused.WithLabelValues(refusedUnreachable)); got != 1 {
			t.Errorf("through %s: refused unreachable = %v, want 1", via, got)
		}
	}
}

// TestConnectionCap: connections over the cap are closed at once, long
// before the wait, and counted; those under it wait.
func TestConnectionCap(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxConnections = 2
	cfg.Wait = 10 * schedulingSlack
	c := newCluster(t, cfg, "a")
	for range 2 {
		c.dial(t, "a")
	}
	deadline := time.Now().Add(schedulingSlack)
	for testutil.ToFloat64(c.pods["a"].proxy.metrics.waiting) != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two connections are not waiting")
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, r := c.dial(t, "a")
	waitClosed(t, conn, r, schedulingSlack)
	if got := testutil.ToFloat64(c.pods["a"].proxy.metrics.refused.WithLabelValues(refusedCap)); got != 1 {
		t.Errorf("refused cap = %v, want 1", got)
	}
}

// TestConfigRefusesOutOfRange: every input outside its range is refused.
func TestConfigRefusesOutOfRange(t *testing.T) {
	valid := Config{Upstream: "127.0.0.1:5432", PeerAddress: ":4041", Wait: time.Second, MaxConnections: 1,
		Leadership: leadershiptest.NewSource(leadership.State{}), Resolver: mapResolver{}}
	if err := valid.Validate(); err != nil {
		t.Fatalf("a valid configuration refused: %v", err)
	}
	for name, change := range map[string]func(*Config){
		"non-loopback upstream": func(c *Config) { c.Upstream = "10.0.0.1:5432" },
		"host name upstream":    func(c *Config) { c.Upstream = "localhost:5432" },
		"upstream port 0":       func(c *Config) { c.Upstream = "127.0.0.1:0" },
		"peer port 0":           func(c *Config) { c.PeerAddress = ":0" },
		"no wait":               func(c *Config) { c.Wait = 0 },
		"wait too long":         func(c *Config) { c.Wait = MaxWait + time.Second },
		"negative drain":        func(c *Config) { c.Drain = -time.Second },
		"drain too long":        func(c *Config) { c.Drain = MaxDrain + time.Second },
		"drain as long as wait": func(c *Config) { c.Drain = c.Wait },
		"no cap":                func(c *Config) { c.MaxConnections = 0 },
		"cap too high":          func(c *Config) { c.MaxConnections = MaxConnectionsLimit + 1 },
	} {
		cfg := valid
		change(&cfg)
		if err := cfg.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
