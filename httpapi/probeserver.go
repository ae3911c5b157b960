package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The probe port listens on the pod IP, so any pod in the cluster can open
// connections to it; each costs the sidecar about 18 KiB (a goroutine and
// its buffers). These bound what such connections can take.
const (
	// MaxProbeConnections caps the connections the probe server holds at
	// once, against a handful in use (the kubelet's probes, one or two
	// Prometheus scrapes). Held connections count twice in the resident
	// memory, since the garbage collector lets the heap grow to twice what
	// is live: 64 × 18 KiB × 2 ≈ 2.3 MiB at most, within the 4 MiB the
	// probe port may cost (docs/security.md); 128 measured over 2 MiB
	// already.
	MaxProbeConnections = 64
	// probeReadTimeout is how long a connection may take to send its
	// request. The kubelet and Prometheus send theirs at once; a connection
	// that sends nothing, or dribbles its headers, frees its slot after
	// this long even without being evicted.
	probeReadTimeout = 2 * time.Second
)

// ListenProbes is Listen for the probe server (/readyz, /healthz, /metrics
// on the pod IP), hardened against connections held open by anyone in the
// cluster:
//
//   - no keep-alive: a connection is closed once answered. The kubelet
//     opens a new connection for every probe and Prometheus scrapes every
//     15 s or more, longer than any idle timeout worth keeping, so idle
//     connections would only ever be held by someone else.
//   - a request must arrive within probeReadTimeout.
//   - at most MaxProbeConnections at once; a new connection beyond the cap
//     evicts the oldest (see connLimiter), so the kubelet's probes are
//     answered however many connections others hold.
//
// Evictions are counted in leader_elector_probe_connections_evicted_total,
// registered on reg.
func ListenProbes(baseCtx context.Context, addr string, h http.Handler, reg prometheus.Registerer) (*Server, error) {
	return listenProbes(baseCtx, addr, h, reg, probeLimits{maxConns: MaxProbeConnections, readTimeout: probeReadTimeout})
}

// probeLimits are the probe server's bounds; tests shrink or stretch them.
type probeLimits struct {
	maxConns    int
	readTimeout time.Duration
}

func listenProbes(baseCtx context.Context, addr string, h http.Handler, reg prometheus.Registerer, limits probeLimits) (*Server, error) {
	evicted := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "leader_elector_probe_connections_evicted_total",
		Help: "Connections to the probe port closed to make room for a new one, because " +
			"the probe server held its maximum of connections. Rising: something holds " +
			"connections to the probe port open.",
	})
	s, err := Listen(baseCtx, addr, h)
	if err != nil {
		return nil, err
	}
	if err := reg.Register(evicted); err != nil {
		_ = s.ln.Close()
		return nil, fmt.Errorf("register the probe server's metrics: %w", err)
	}
	s.srv.ReadHeaderTimeout = limits.readTimeout
	// Probes and scrapes send no body.
	s.srv.ReadTimeout = limits.readTimeout
	s.srv.SetKeepAlivesEnabled(false)
	s.srv.ConnState = newConnLimiter(limits.maxConns, evicted.Inc).track
	return s, nil
}

// connLimiter holds an http.Server to at most max connections: when a new
// connection makes one too many, it closes the oldest connection still
// waiting for its request, or, if every one has a request under way, the
// oldest of all.
//
// Why not golang.org/x/net/netutil.LimitListener: it stops accepting at the
// cap, so the kubelet's probe would queue in the kernel's backlog behind
// every connection an attacker keeps opening, and time out: holding the cap
// would make the pod unready, then restart it. Closing the newcomer instead
// would fail the probe just the same. Evicting the oldest keeps the cost
// bounded and always serves a newcomer that asks at once, as the kubelet
// does: to evict it, others would have to open max connections in the
// instant between its connect and its request.
type connLimiter struct {
	max     int
	evicted func()

	mu    sync.Mutex
	seq   uint64
	conns map[net.Conn]*trackedConn
}

type trackedConn struct {
	seq   uint64 // accept order: lower is older
	state http.ConnState
}

func newConnLimiter(maxConns int, evicted func()) *connLimiter {
	return &connLimiter{max: maxConns, evicted: evicted, conns: make(map[net.Conn]*trackedConn, maxConns+1)}
}

// track is the http.Server's ConnState hook. The server calls it for
// StateNew in its accept loop, before it serves the connection.
func (l *connLimiter) track(c net.Conn, state http.ConnState) {
	var victim net.Conn
	l.mu.Lock()
	switch state {
	case http.StateNew:
		l.seq++
		l.conns[c] = &trackedConn{seq: l.seq, state: state}
		if len(l.conns) > l.max {
			victim = l.oldestBut(c)
			// Forgotten now, not when its goroutine reports it closed, so
			// that a burst of new connections evicts one each.
			if victim != nil {
				delete(l.conns, victim)
			}
		}
	case http.StateActive, http.StateIdle:
		if t, ok := l.conns[c]; ok {
			t.state = state
		}
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	}
	l.mu.Unlock()
	if victim != nil {
		// Its goroutine sees the error and ends; a request under way gets
		// no answer.
		_ = victim.Close()
		l.evicted()
	}
}

// oldestBut returns the oldest connection other than newcomer that waits
// for a request (new, or idle between requests), else the oldest of all
// others. Connections that send their request at once spend the least time
// waiting, so they are the last to go; connections that dribble their
// request are active and old, so they go before a fresh probe.
func (l *connLimiter) oldestBut(newcomer net.Conn) net.Conn {
	var oldestWaiting, oldestAny net.Conn
	var waitingSeq, anySeq uint64
	for c, t := range l.conns {
		if c == newcomer {
			continue
		}
		if oldestAny == nil || t.seq < anySeq {
			oldestAny, anySeq = c, t.seq
		}
		if t.state != http.StateActive && (oldestWaiting == nil || t.seq < waitingSeq) {
			oldestWaiting, waitingSeq = c, t.seq
		}
	}
	if oldestWaiting != nil {
		return oldestWaiting
	}
	return oldestAny
}
