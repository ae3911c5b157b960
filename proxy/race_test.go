package proxy

import (
	"context"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// term is one pod's term as the test set it: from just before its views
// were set to just before they were changed again.
type term struct {
	pod        string
	start, end time.Time
}

// TestLeadershipMovesWhileConnectionsInFlight: leadership moves around
// three pods, each change reaching the pods' views in a random order (so
// that views disagree for a moment: a follower may point at a pod that no
// longer leads, two followers at each other), while clients keep
// connecting to random pods and asking, some on a new connection each
// time, some on one connection for as long as it lasts. Over the run:
//   - an app is connected to only during its pod's term (never after it);
//   - every connection to an app is closed within schedulingSlack of the
//     end of the term it was made in;
//   - a pod dials only its own app or another pod's peer port, never its
//     own: nothing is forwarded twice, and nothing loops;
//   - every answer names a pod that led at some moment while it was asked.
func TestLeadershipMovesWhileConnectionsInFlight(t *testing.T) {
	leadershipMoves(t, baseConfig(), false)
}

// TestGracefulMovesWhileConnectionsInFlight: the same, with every term
// ended gracefully: the leader's proxy quiesces (a drain of its own, as
// before a release) before the views change.
func TestGracefulMovesWhileConnectionsInFlight(t *testing.T) {
	cfg := baseConfig()
	cfg.Drain = 20 * time.Millisecond
	leadershipMoves(t, cfg, true)
}

func leadershipMoves(t *testing.T, cfg Config, graceful bool) {
	names := []string{"a", "b", "c"}
	c := newCluster(t, cfg, names...)
	const terms = 30
	const termLength, gap = 60 * time.Millisecond, 15 * time.Millisecond

	var done atomic.Bool
	var answers, failures atomic.Int64
	var wrong []string
	var mu sync.Mutex
	var history []term
	ledDuring := func(who string, from, to time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, tm := range history {
			// The pod's proxy acts on the end of its term once its view
			// has changed: schedulingSlack later at most.
			if tm.pod == who && tm.start.Before(to) && (tm.end.IsZero() || tm.end.Add(schedulingSlack).After(from)) {
				return true
			}
		}
		return false
	}
	var clients sync.WaitGroup
	for range 6 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for !done.Load() {
				via := names[rand.IntN(len(names))]
				from := time.Now()
				conn, err := net.Dial("tcp", c.pods[via].proxy.Addr().String())
				if err != nil {
					failures.Add(1)
					continue
				}
				got, err := ask(conn, bufioReader(conn), testWait+schedulingSlack)
				_ = conn.Close()
				if err != nil {
					failures.Add(1)
					continue
				}
				answers.Add(1)
				if !ledDuring(got, from, time.Now()) {
					mu.Lock()
					wrong = append(wrong, got)
					mu.Unlock()
				}
			}
		}()
	}

	// Keep-alive clients: each holds a connection and asks on it until the
	// proxy closes it, then connects again; their connections outlive
	// terms unless the proxies close them.
	for range 3 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for !done.Load() {
				conn, err := net.Dial("tcp", c.pods[names[rand.IntN(len(names))]].proxy.Addr().String())
				if err != nil {
					failures.Add(1)
					continue
				}
				r := bufioReader(conn)
				for !done.Load() {
					from := time.Now()
					got, err := ask(conn, r, testWait+schedulingSlack)
					if err != nil {
						failures.Add(1)
						break
					}
					answers.Add(1)
					if !ledDuring(got, from, time.Now()) {
						mu.Lock()
						wrong = append(wrong, got)
						mu.Unlock()
					}
					time.Sleep(5 * time.Millisecond)
				}
				_ = conn.Close()
			}
		}()
	}

	shuffled := func() []string {
		out := append([]string(nil), names...)
		rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
		return out
	}
	for k := 1; k <= terms; k++ {
		leader := names[k%len(names)]
		if graceful && k > 1 {
			// Still its term: the quiesce runs within it.
			_ = c.pods[names[(k-1)%len(names)]].proxy.Quiesce(context.Background(), int64(k-1))
		}
		mu.Lock()
		if n := len(history); n > 0 {
			history[n-1].end = time.Now()
		}
		mu.Unlock()
		if k%3 == 0 {
			// Sometimes straight to the next term, sometimes through a
			// moment with no holder.
			c.lead("", int64(k), shuffled()...)
			time.Sleep(gap)
		}
		mu.Lock()
		history = append(history, term{pod: leader, start: time.Now()})
		mu.Unlock()
		c.lead(leader, int64(k), shuffled()...)
		time.Sleep(termLength)
	}
	done.Store(true)
	clients.Wait()
	mu.Lock()
	last := history[len(history)-1]
	ended := history[:len(history)-1]
	mu.Unlock()

	if answers.Load() < terms {
		t.Fatalf("only %d answers (%d failures): the proxies forwarded too little to judge", answers.Load(), failures.Load())
	}
	t.Logf("%d answers, %d failed or closed connections, over %d terms", answers.Load(), failures.Load(), terms)
	if len(wrong) > 0 {
		t.Errorf("%d answers came from pods that did not lead while asked: %v", len(wrong), wrong)
	}
	for _, name := range names {
		p := c.pods[name]
		checkAppConnections(t, p, ended, last)
		for addr, n := range p.dialer.snapshot() {
			if addr != p.proxy.cfg.Upstream && (addr == net.JoinHostPort(p.ip, c.peerPort) || !isPeerOfAnother(c, name, addr)) {
				t.Errorf("%s dialed %s %d times: neither its app nor another pod's peer port", name, addr, n)
			}
		}
	}
}

// checkAppConnections: every connection to p's app began during one of
// p's terms and closed within schedulingSlack of that term's end.
func checkAppConnections(t *testing.T, p *pod, ended []term, last term) {
	t.Helper()
	all := append(append([]term(nil), ended...), last)
	for _, conn := range p.app.history() {
		// The term it was made in: p's last term begun before it.
		var in *term
		for i, tm := range all {
			if tm.pod == p.name && !conn.accepted.Before(tm.start) {
				in = &all[i]
			}
		}
		switch {
		case in == nil || (!in.end.IsZero() && conn.accepted.After(in.end.Add(schedulingSlack))):
			t.Errorf("%s's app accepted a connection at %s, outside every term of %s", p.name, conn.accepted.Format(time.StampMicro), p.name)
		case !in.end.IsZero() && (conn.closed.IsZero() || conn.closed.After(in.end.Add(schedulingSlack))):
			t.Errorf("%s's app: a connection of the term that ended at %s closed at %s", p.name, in.end.Format(time.StampMicro), conn.closed.Format(time.StampMicro))
		}
	}
}

// isPeerOfAnother reports whether addr is the peer port of a pod other
// than name.
func isPeerOfAnother(c *cluster, name, addr string) bool {
	for other, p := range c.pods {
		if other != name && addr == net.JoinHostPort(p.ip, c.peerPort) {
			return true
		}
	}
	return false
}
