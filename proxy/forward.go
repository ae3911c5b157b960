package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
)

// peerAccepted is the one byte the leader's peer port sends once it has
// connected to its app and registered the connection with its term: only
// then does a follower start forwarding the client's bytes, so that a
// follower whose view of the leader is late retries instead of handing its
// client a connection that is closed at once.
const peerAccepted = 'Y'

// errNoLeader: no leader is known.
var errNoLeader = errors.New("no leader known")

// serveClient forwards a client's connection to the leader's app: its own
// if this pod leads, else through the leader's peer port. It waits up to
// cfg.Wait for a leader that can be reached, then closes the connection.
func (p *Proxy) serveClient(ctx context.Context, c net.Conn) {
	p.metrics.accepted.WithLabelValues(listenerClient).Inc()
	p.metrics.waiting.Inc()
	f, err := p.connect(ctx, c, time.Now().Add(p.cfg.Wait))
	p.metrics.waiting.Dec()
	if err != nil {
		reason := refusedUnreachable
		if errors.Is(err, errNoLeader) {
			reason = refusedNoLeader
		}
		p.metrics.refused.WithLabelValues(reason).Inc()
		p.failures.closed(err, p.cfg.Wait)
		_ = c.Close()
		return
	}
	to := forwardedLocal
	if f.route.kind == routeRemote {
		to = forwardedLeader
	}
	p.metrics.forwarded.WithLabelValues(to).Inc()
	p.pipe(f)
}

// Retries of a route that refused: the leader's own view of its new term
// can lag a follower's (the follower may see the Lease's new version
// before the leader has its write's answer), and an app may be starting.
const (
	retryFirst = 10 * time.Millisecond
	retryMax   = 500 * time.Millisecond
)

// connect connects c's upstream on the current route until deadline,
// retrying at once on a change of route, else with a backoff. A change of
// route also ends an attempt in progress: a dial to a leader that is gone
// (its pod deleted, its address silent) or a leader's peer port that never
// accepts would otherwise hold the connection to a route no longer current
// until the deadline. That is one cause, not proven, of the six new
// connections of one real-node proof run that one pod held for the whole
// 4 s wait and reset while the others forwarded to the new leader
// (docs/routing.md).
func (p *Proxy) connect(ctx context.Context, c net.Conn, deadline time.Time) (*forwarded, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	backoff := wait.Backoff{Duration: retryFirst, Factor: 2, Cap: retryMax, Steps: math.MaxInt32}
	for {
		r, changed := p.routes.get()
		attempt, endAttempt := context.WithCancel(ctx)
		go func() {
			select {
			case <-changed:
				endAttempt()
			case <-attempt.Done():
			}
		}()
		up, err := p.dial(attempt, r)
		routeChanged := attempt.Err() != nil && ctx.Err() == nil
		endAttempt()
		if err == nil {
			f := &forwarded{client: c, upstream: up, route: r}
			if p.routes.add(f) {
				return f, nil
			}
			// The term ended while connecting: try the next route.
			_ = up.Close()
			continue
		}
		var retry <-chan time.Time
		if r.kind != routeNone && !routeChanged {
			if ctx.Err() == nil {
				p.failures.log(err, r)
			}
			timer := time.NewTimer(backoff.Step())
			retry = timer.C
			defer timer.Stop() // at most a few dozen: the backoff reaches retryMax at once
		}
		select {
		case <-changed:
		case <-retry:
		case <-ctx.Done():
			return nil, err
		}
	}
}

// dial connects to the app (this pod leads) or to the leader's peer port.
func (p *Proxy) dial(ctx context.Context, r route) (net.Conn, error) {
	switch r.kind {
	case routeLocal:
		return p.dialer.DialContext(ctx, "tcp", p.cfg.Upstream)
	case routeRemote:
		return p.dialLeader(ctx, r)
	}
	return nil, errNoLeader
}

// dialLeader connects to the leader's peer port and waits for it to accept.
func (p *Proxy) dialLeader(ctx context.Context, r route) (net.Conn, error) {
	host, err := p.cfg.Resolver.Resolve(ctx, r.holder, r.token)
	if err != nil {
		return nil, fmt.Errorf("address of leader %s: %w", r.holder, err)
	}
	addr := net.JoinHostPort(host, p.peerPort)
	up, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = up.SetReadDeadline(deadline)
	}
	// The wait for the leader's answer ends with ctx too (a change of
	// route: connect).
	stop := context.AfterFunc(ctx, func() { _ = up.SetReadDeadline(time.Unix(1, 0)) })
	var b [1]byte
	_, err = io.ReadFull(up, b[:])
	// If ctx ended meanwhile, its past deadline may land on the
	// connection at any moment: not one to hand on.
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil || b[0] != peerAccepted {
		_ = up.Close()
		return nil, fmt.Errorf("leader %s's proxy at %s did not accept the connection (it may no longer lead): %v", r.holder, addr, err)
	}
	_ = up.SetReadDeadline(time.Time{})
	return up, nil
}

// servePeer serves a follower's connection: only while this pod leads, and
// only to its own app, never onwards.
func (p *Proxy) servePeer(ctx context.Context, c net.Conn) {
	p.metrics.accepted.WithLabelValues(listenerPeer).Inc()
	r, _ := p.routes.get()
	if r.kind != routeLocal {
		p.metrics.refused.WithLabelValues(refusedNotLeader).Inc()
		_ = c.Close()
		return
	}
	dialCtx, cancel := context.WithTimeout(ctx, p.cfg.Wait)
	up, err := p.dial(dialCtx, r)
	cancel()
	if err != nil {
		p.failures.log(err, r)
		p.metrics.refused.WithLabelValues(refusedUnreachable).Inc()
		_ = c.Close()
		return
	}
	f := &forwarded{client: c, upstream: up, route: r}
	if !p.routes.add(f) {
		p.metrics.refused.WithLabelValues(refusedNotLeader).Inc()
		f.close()
		return
	}
	if _, err := c.Write([]byte{peerAccepted}); err != nil {
		p.routes.remove(f)
		f.close()
		return
	}
	p.metrics.forwarded.WithLabelValues(forwardedLocal).Inc()
	p.pipe(f)
}

// pipe copies both ways until both directions have ended or f is closed.
// An end of one direction is passed on as a half-close, as a direct
// connection would. Between two TCP connections io.Copy splices in the
// kernel (ReadFrom), so no buffer of ours holds the bytes: that is why
// there is no buffer pool here.
func (p *Proxy) pipe(f *forwarded) {
	var wg sync.WaitGroup
	copyHalf := func(dst, src net.Conn, direction string) {
		defer wg.Done()
		n, err := io.Copy(dst, src)
		p.metrics.bytes.WithLabelValues(direction).Add(float64(n))
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			f.close()
		}
	}
	// One direction in this goroutine: a goroutine's stack is most of an
	// open connection's memory.
	wg.Add(2)
	go copyHalf(f.upstream, f.client, directionToUpstream)
	copyHalf(f.client, f.upstream, directionToClient)
	wg.Wait()
	p.routes.remove(f)
	f.close()
}

// failureLog logs the failures to reach an upstream, at most once per
// interval: a leader whose app is down would otherwise log once per client
// connection. Every failure is counted (refused).
type failureLog struct {
	logger    klog.Logger
	sometimes rate.Sometimes
	// gaveUp limits closed's lines, apart from log's: a client's
	// connection closed is what its owner sees, and must show in the log
	// even while the retries' failures fill their interval.
	gaveUp rate.Sometimes
}

// failureLogInterval is the least time between two logged failures.
const failureLogInterval = 10 * time.Second

// closed logs a client's connection closed after the wait for a
// reachable leader, with the last attempt's error.
func (l *failureLog) closed(err error, wait time.Duration) {
	l.gaveUp.Do(func() {
		l.logger.Error(err, "Proxy closed a client's connection: no leader reached within the wait (logged at most once per interval)", "wait", wait, "interval", failureLogInterval)
	})
}

func (l *failureLog) log(err error, r route) {
	l.sometimes.Do(func() {
		to := "the app"
		if r.kind == routeRemote {
			to = "the leader " + r.holder
		}
		l.logger.Error(err, "Proxy could not connect a client; it is retried until the wait ends, then closed (logged at most once per interval)", "to", to, "fencingToken", r.token, "interval", failureLogInterval)
	})
}
