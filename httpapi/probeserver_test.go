package httpapi

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
)

// startProbeServer serves the probe routes (always ready and healthy) on
// loopback with limits, and returns its address and registry.
func startProbeServer(t *testing.T, limits probeLimits) (string, *prometheus.Registry) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	reg := prometheus.NewRegistry()
	ok := func() error { return nil }
	s, err := listenProbes(ctx, "127.0.0.1:0", newProbeRoutes(ok, ok, reg), reg, limits)
	if err != nil {
		t.Fatalf("listenProbes: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()
	t.Cleanup(func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
		defer cancel()
		if err := s.Shutdown(shutdownCtx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s.Addr(), reg
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, wait.ForeverTestTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends GET path on c and returns the answer.
func get(t *testing.T, c net.Conn, path string) *http.Response {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: probe\r\n\r\n"); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if err := c.SetReadDeadline(time.Now().Add(wait.ForeverTestTimeout)); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("GET %s: reading the body: %v", path, err)
	}
	resp.Body.Close()
	return resp
}

// promptly is how long the tests give the server to close a connection it
// should close at once (an answered one, an evicted one) or after a short
// read timeout: well below the 5 s header timeout of the API server.
const promptly = 2 * time.Second

// closedByServer reports whether the server has closed c, waiting up to
// within for it (a read that ends in EOF or a reset, not in the deadline).
func closedByServer(t *testing.T, c net.Conn, within time.Duration) bool {
	t.Helper()
	if err := c.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return false
	case err == nil:
		t.Fatal("the server sent bytes nobody asked for")
	}
	return true
}

// TestProbeServerNoKeepAlive: an answered connection is closed at once, so
// no one can hold idle connections to the probe port (the kubelet does not
// reuse them).
func TestProbeServerNoKeepAlive(t *testing.T) {
	addr, _ := startProbeServer(t, probeLimits{maxConns: 8, readTimeout: time.Minute})
	for _, path := range []string{"/readyz", "/healthz", "/metrics"} {
		c := dial(t, addr)
		resp := get(t, c, path)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s", path, resp.Status)
		}
		if !resp.Close {
			t.Errorf("GET %s: the answer does not say Connection: close", path)
		}
		if !closedByServer(t, c, promptly) {
			t.Errorf("GET %s: the connection is still open after the answer", path)
		}
	}
}

// TestProbeServerSilentConnectionTimesOut: a connection that sends nothing
// is closed after the read timeout, however long it would wait.
func TestProbeServerSilentConnectionTimesOut(t *testing.T) {
	addr, _ := startProbeServer(t, probeLimits{maxConns: 8, readTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	if !closedByServer(t, c, promptly) {
		t.Error("a connection that sends nothing is still open")
	}
}

// TestProbeServerCapEvictsOldest: with the cap held by connections that
// send nothing (the read timeout is long, so only eviction frees a slot),
// each new connection evicts the oldest, and a probe is answered.
func TestProbeServerCapEvictsOldest(t *testing.T) {
	const maxConns = 4
	addr, reg := startProbeServer(t, probeLimits{maxConns: maxConns, readTimeout: time.Minute})
	var silent []net.Conn
	for range maxConns + 2 {
		silent = append(silent, dial(t, addr))
	}
	// The server accepts in order: the fifth and sixth evicted the first
	// two.
	for i, c := range silent[:2] {
		if !closedByServer(t, c, promptly) {
			t.Fatalf("silent connection %d of %d was not evicted", i, len(silent))
		}
	}
	// A probe while the cap is held evicts the third and is answered.
	start := time.Now()
	if resp := get(t, dial(t, addr), "/readyz"); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz with the cap held: %s", resp.Status)
	}
	t.Logf("a probe with the cap held was answered in %v", time.Since(start))
	if !closedByServer(t, silent[2], promptly) {
		t.Fatal("the probe did not evict the oldest silent connection")
	}
	// The newer ones are still served.
	for _, c := range silent[3:] {
		if resp := get(t, c, "/metrics"); resp.StatusCode != http.StatusOK {
			t.Errorf("GET /metrics on a held connection that was not evicted: %s", resp.Status)
		}
	}
	if got := counterValue(t, reg, "leader_elector_probe_connections_evicted_total"); got != 3 {
		t.Errorf("evicted connections counted: %v, want 3", got)
	}
}

// TestProbeServerCapHeldBySlowRequests: connections that dribble their
// request (slowloris) cannot hold the probes off either: a new connection
// evicts one of them.
func TestProbeServerCapHeldBySlowRequests(t *testing.T) {
	const maxConns = 4
	addr, _ := startProbeServer(t, probeLimits{maxConns: maxConns, readTimeout: time.Minute})
	var slow []net.Conn
	for range maxConns {
		c := dial(t, addr)
		if _, err := io.WriteString(c, "GET /readyz HTTP/1.1\r\nHost: probe\r\n"); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
	}
	client := &http.Client{Timeout: wait.ForeverTestTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 3 {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz with the cap held by slow requests: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /readyz with the cap held by slow requests: %s", resp.Status)
		}
		if i > 0 {
			continue
		}
		// The first probe found the cap held by the four, so it evicted
		// one of them before it was served.
		evicted := 0
		for _, c := range slow {
			if closedByServer(t, c, 100*time.Millisecond) {
				evicted++
			}
		}
		if evicted != 1 {
			t.Errorf("the first probe evicted %d slow connections, want 1", evicted)
		}
	}
}

// counterValue is the value of the unlabelled counter name in g.
func counterValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// fakeConn is a net.Conn that records Close.
type fakeConn struct {
	net.Conn
	name   string
	closed atomic.Bool
}

func (c *fakeConn) Close() error { c.closed.Store(true); return nil }

// TestConnLimiterEviction: which connection goes when one too many arrives.
func TestConnLimiterEviction(t *testing.T) {
	type step struct {
		conn  string
		state http.ConnState
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		evicted []string
	}{
		{
			name:  "under the cap nothing goes",
			steps: []step{{"a", http.StateNew}, {"b", http.StateNew}, {"c", http.StateNew}},
		},
		{
			name:    "the oldest waiting goes first",
			steps:   []step{{"a", http.StateNew}, {"b", http.StateNew}, {"c", http.StateNew}, {"d", http.StateNew}},
			evicted: []string{"a"},
		},
		{
			name: "a request under way outlives older waiting connections",
			steps: []step{
				{"a", http.StateNew}, {"a", http.StateActive}, {"b", http.StateNew}, {"c", http.StateNew},
				{"d", http.StateNew}, {"e", http.StateNew},
			},
			evicted: []string{"b", "c"},
		},
		{
			name: "idle between requests counts as waiting",
			steps: []step{
				{"a", http.StateNew}, {"a", http.StateActive}, {"b", http.StateNew}, {"b", http.StateActive},
				{"c", http.StateNew}, {"c", http.StateActive}, {"b", http.StateIdle}, {"d", http.StateNew},
			},
			evicted: []string{"b"},
		},
		{
			name: "all under way: the oldest goes, never the newcomer",
			steps: []step{
				{"a", http.StateNew}, {"a", http.StateActive}, {"b", http.StateNew}, {"b", http.StateActive},
				{"c", http.StateNew}, {"c", http.StateActive}, {"d", http.StateNew},
			},
			evicted: []string{"a"},
		},
		{
			name: "closed connections free their slot",
			steps: []step{
				{"a", http.StateNew}, {"b", http.StateNew}, {"c", http.StateNew}, {"a", http.StateClosed},
				{"b", http.StateHijacked}, {"d", http.StateNew}, {"e", http.StateNew},
			},
		},
		{
			name: "an evicted connection reporting later does not come back",
			steps: []step{
				{"a", http.StateNew}, {"b", http.StateNew}, {"c", http.StateNew}, {"d", http.StateNew},
				{"a", http.StateActive}, {"e", http.StateNew}, {"a", http.StateClosed},
			},
			evicted: []string{"a", "b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var counted int
			l := newConnLimiter(3, func() { counted++ })
			conns := map[string]*fakeConn{}
			for _, s := range tc.steps {
				c, ok := conns[s.conn]
				if !ok {
					c = &fakeConn{name: s.conn}
					conns[s.conn] = c
				}
				l.track(c, s.state)
			}
			var evicted []string
			for _, name := range []string{"a", "b", "c", "d", "e"} {
				if c, ok := conns[name]; ok && c.closed.Load() {
					evicted = append(evicted, name)
				}
			}
			if !slices.Equal(evicted, tc.evicted) {
				t.Errorf("evicted %v, want %v", evicted, tc.evicted)
			}
			if counted != len(tc.evicted) {
				t.Errorf("counted %d evictions, want %d", counted, len(tc.evicted))
			}
		})
	}
}
