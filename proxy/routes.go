package proxy

import (
	"net"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
)

// routeKind is where a new connection goes.
type routeKind int

const (
	// routeNone: no leader known (an election, or this pod's claim ran out
	// while the Lease still names it): new connections wait.
	routeNone routeKind = iota
	// routeLocal: this pod leads; to its app.
	routeLocal
	// routeRemote: another pod leads; to its peer port.
	routeRemote
)

// route is where connections go in one term: a connection forwarded on a
// route is closed when the route is no longer the current one.
type route struct {
	kind   routeKind
	holder string
	token  int64
}

// routeOf is the route a state asks for. A pod that the Lease names but
// whose claim has run out is no route: neither its own app (its claim is
// over) nor itself as a remote leader.
func routeOf(s leadership.State) route {
	switch {
	case s.IsLeader:
		return route{kind: routeLocal, holder: s.Identity, token: s.FencingToken}
	case s.Holder != "" && s.Holder != s.Identity:
		return route{kind: routeRemote, holder: s.Holder, token: s.FencingToken}
	}
	return route{kind: routeNone}
}

// forwarded is one connection and its upstream, forwarded on a route.
type forwarded struct {
	client, upstream net.Conn
	route            route
	closeOnce        sync.Once
}

// close closes both ends; the copies then end.
func (f *forwarded) close() {
	f.closeOnce.Do(func() {
		_ = f.client.Close()
		_ = f.upstream.Close()
	})
}

// routes is the current route and the connections forwarded on every
// route, so that a change of route closes those of the routes that ended.
type routes struct {
	drain   time.Duration
	metrics *Metrics

	mu      sync.Mutex
	current route
	// changed is closed at the next change of current.
	changed chan struct{}
	conns   map[*forwarded]struct{}
}

func newRoutes(drain time.Duration, m *Metrics) *routes {
	return &routes{drain: drain, metrics: m, changed: make(chan struct{}), conns: map[*forwarded]struct{}{}}
}

// get returns the current route and a channel closed at its next change.
func (rs *routes) get() (route, <-chan struct{}) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.current, rs.changed
}

// set makes r the current route and reports whether it changed. The
// connections of every other route are closed, after the drain.
func (rs *routes) set(r route) bool {
	rs.mu.Lock()
	if r == rs.current {
		rs.mu.Unlock()
		return false
	}
	rs.current = r
	close(rs.changed)
	rs.changed = make(chan struct{})
	var ended []*forwarded
	for f := range rs.conns {
		if f.route != r {
			ended = append(ended, f)
			delete(rs.conns, f)
		}
	}
	rs.mu.Unlock()
	if len(ended) == 0 {
		return true
	}
	closeEnded := func() {
		for _, f := range ended {
			f.close()
		}
		rs.metrics.closedOnChange.Add(float64(len(ended)))
	}
	if rs.drain > 0 {
		time.AfterFunc(rs.drain, closeEnded)
	} else {
		closeEnded()
	}
	return true
}

// add registers f if its route is still the current one; otherwise it
// reports false, and the caller closes f: its term ended while it was
// being set up.
func (rs *routes) add(f *forwarded) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if f.route != rs.current {
		return false
	}
	rs.conns[f] = struct{}{}
	return true
}

// remove forgets f once its copies have ended.
func (rs *routes) remove(f *forwarded) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	delete(rs.conns, f)
}

// closeAll closes every connection (the proxy stops).
func (rs *routes) closeAll() {
	rs.mu.Lock()
	all := make([]*forwarded, 0, len(rs.conns))
	for f := range rs.conns {
		all = append(all, f)
		delete(rs.conns, f)
	}
	rs.mu.Unlock()
	for _, f := range all {
		f.close()
	}
}
