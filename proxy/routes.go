package proxy

import (
	"net"
	"sync"

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
	metrics *Metrics
	mu      sync.Mutex
	current route
	// quiescing is the current route while its term ends gracefully
	// (quiesce): it takes no new connection, and get returns routeNone.
	quiescing route
	// changed is closed at the next change of current.
	changed chan struct{}
	// removed is closed at the next removal of a connection.
	removed chan struct{}
	conns   map[*forwarded]struct{}
}

func newRoutes(m *Metrics) *routes {
	return &routes{metrics: m, changed: make(chan struct{}), removed: make(chan struct{}), conns: map[*forwarded]struct{}{}}
}

// get returns the route a new connection takes (routeNone while the
// current one is quiescing) and a channel closed at the next change of the
// current route.
func (rs *routes) get() (route, <-chan struct{}) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.current == rs.quiescing {
		return route{kind: routeNone}, rs.changed
	}
	return rs.current, rs.changed
}

// set makes r the current route and reports whether it changed. The
// connections of every other route are closed at once: a term that ends
// gracefully has let them end before (quiesce).
func (rs *routes) set(r route) bool {
	rs.mu.Lock()
	if r == rs.current {
		rs.mu.Unlock()
		return false
	}
	rs.current = r
	rs.quiescing = route{}
	close(rs.changed)
	rs.changed = make(chan struct{})
	rs.closeAndUnlock(func(f *forwarded) bool { return f.route != r })
	return true
}

// closeAndUnlock takes the connections that match out of rs, releases
// rs.mu (which the caller holds), then closes them outside the lock.
func (rs *routes) closeAndUnlock(match func(*forwarded) bool) {
	var ended []*forwarded
	for f := range rs.conns {
		if match(f) {
			ended = append(ended, f)
			delete(rs.conns, f)
		}
	}
	if len(ended) > 0 {
		rs.notifyRemovedLocked()
	}
	rs.mu.Unlock()
	// Counted first: whoever sees a connection closed sees it counted.
	rs.metrics.closedOnChange.Add(float64(len(ended)))
	for _, f := range ended {
		f.close()
	}
}

// notifyRemovedLocked wakes those waiting for connections to end (open).
func (rs *routes) notifyRemovedLocked() {
	close(rs.removed)
	rs.removed = make(chan struct{})
}

// quiesce stops new connections on the current route if it is this pod's
// own term token (routeLocal), and returns it; false if this pod does not
// lead in that term.
func (rs *routes) quiesce(token int64) (route, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.current.kind != routeLocal || rs.current.token != token {
		return route{}, false
	}
	rs.quiescing = rs.current
	return rs.current, true
}

// closeRoute closes the connections forwarded on r (the end of a drain
// that ran out, while r's term still goes on).
func (rs *routes) closeRoute(r route) {
	rs.mu.Lock()
	rs.closeAndUnlock(func(f *forwarded) bool { return f.route == r })
}

// resume ends a quiesce of r that no release followed: if r is still the
// current route, it takes new connections again, and those waiting try it
// at once.
func (rs *routes) resume(r route) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.quiescing != r || rs.current != r {
		return
	}
	rs.quiescing = route{}
	close(rs.changed)
	rs.changed = make(chan struct{})
}

// open returns how many connections are open on r, and a channel closed
// at the next removal of a connection; none once r is no longer the
// current route (its connections have been closed).
func (rs *routes) open(r route) (int, <-chan struct{}) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.current != r {
		return 0, rs.removed
	}
	n := 0
	for f := range rs.conns {
		if f.route == r {
			n++
		}
	}
	return n, rs.removed
}

// add registers f if its route is still the current one; otherwise it
// reports false, and the caller closes f: its term ended while it was
// being set up.
func (rs *routes) add(f *forwarded) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if f.route != rs.current || f.route == rs.quiescing {
		// Its term ended, or is ending: a connection that chose its route
		// before the quiesce began and was still connecting.
		return false
	}
	rs.conns[f] = struct{}{}
	return true
}

// remove forgets f once its copies have ended.
func (rs *routes) remove(f *forwarded) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, ok := rs.conns[f]; ok {
		delete(rs.conns, f)
		rs.notifyRemovedLocked()
	}
}

// closeAll closes every connection (the proxy stops).
func (rs *routes) closeAll() {
	rs.mu.Lock()
	all := make([]*forwarded, 0, len(rs.conns))
	for f := range rs.conns {
		all = append(all, f)
		delete(rs.conns, f)
	}
	rs.notifyRemovedLocked()
	rs.mu.Unlock()
	for _, f := range all {
		f.close()
	}
}
