package proxy

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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

// TestDrainKeepsConnectionsForTheDrain: with a drain, the old term's
// connection still works during the drain and is closed after it.
func TestDrainKeepsConnectionsForTheDrain(t *testing.T) {
	const drain = 300 * time.Millisecond
	cfg := baseConfig()
	cfg.Drain = drain
	c := newCluster(t, cfg, "a", "b")
	c.lead("a", 1)
	conn, r := c.dial(t, "a")
	if got, err := ask(conn, r, schedulingSlack); err != nil || got != "a" {
		t.Fatalf("answer %q, %v", got, err)
	}
	lost := time.Now()
	c.lead("b", 2)
	if got, err := ask(conn, r, schedulingSlack); (err != nil || got != "a") && time.Since(lost) < drain {
		t.Fatalf("during the drain: answer %q, %v; want a", got, err)
	}
	closed := waitClosed(t, conn, r, drain+schedulingSlack)
	if d := closed.Sub(lost); d < drain {
		t.Errorf("closed %v after the change, before the drain (%v)", d, drain)
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
