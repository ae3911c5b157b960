// Package proxy is an L4 (TCP) forwarder that follows the leader: clients
// connect to any candidate's proxy; the leader forwards them to its own app,
// a follower to the leader's peer port, which forwards only to the leader's
// own app and only while that pod leads. So a connection takes at most one
// hop between sidecars and can never loop. When this pod stops leading, the
// connections it forwarded to its app are closed (after an optional drain);
// a follower closes those it forwarded to a leader that is no longer the
// leader, so that clients reconnect to the new one.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/leadership"
)

// Bounds of the configuration, which options check.
const (
	// MaxConnectionsLimit is the largest --proxy-max-connections.
	MaxConnectionsLimit = 65536
	// MaxDrain is the longest --proxy-drain: a graceful handover may take
	// that much longer.
	MaxDrain = time.Minute
	// MaxShutdownDelay is the longest --proxy-shutdown-delay: within the
	// pod's termination grace period.
	MaxShutdownDelay = time.Minute
	// MaxWait is the longest --proxy-wait: a client waits no longer for a
	// leader than a few lease durations take.
	MaxWait = 5 * time.Minute
)

// Leadership is what the proxy reads of the election.
type Leadership interface {
	// Watch returns the current state and a channel closed at its next
	// change; IsLeader is time-bounded, and a claim that runs out is a
	// change.
	Watch() (leadership.State, <-chan struct{})
}

// Resolver finds the address of the holder's pod from a source that the
// holder cannot write itself (see PodAddresses).
type Resolver interface {
	// Resolve returns the host (an IP address) of the pod named holder,
	// which leads in the term token.
	Resolve(ctx context.Context, holder string, token int64) (string, error)
}

// Config configures a Proxy.
type Config struct {
	// Address is where clients connect (the pod IP, any port).
	Address string
	// PeerAddress is where followers' proxies connect; its port is the one
	// this proxy dials on the leader's pod. It accepts only while this pod
	// leads, and forwards only to Upstream.
	PeerAddress string
	// Upstream is the app's loopback host:port.
	Upstream string
	// Wait bounds how long a new connection waits for a leader that can be
	// reached (none known, or its proxy or app refusing), then it is closed.
	Wait time.Duration
	// Drain is how long a graceful end of this pod's term (Quiesce) waits
	// for the connections forwarded to its app to end, while it still
	// leads (0: not at all). A term that ends otherwise closes them at once.
	Drain time.Duration
	// ShutdownDelay is how long the proxy keeps forwarding, to the new
	// leader, after this pod has left the election at shutdown (0: it stops
	// at once); the caller runs it (see package app).
	ShutdownDelay time.Duration
	// MaxConnections caps the open connections of each listener; a
	// connection over the cap is closed at once.
	MaxConnections int
	Leadership     Leadership
	Resolver       Resolver
	// Dialer dials the upstream and the leader's peer port; nil: a
	// net.Dialer.
	Dialer interface {
		DialContext(ctx context.Context, network, address string) (net.Conn, error)
	}
}

// Validate checks what New needs.
func (c Config) Validate() error {
	var errs []error
	if c.Wait <= 0 || c.Wait > MaxWait {
		errs = append(errs, fmt.Errorf("the wait for a leader must be within (0s, %v], got %v", MaxWait, c.Wait))
	}
	if c.Drain < 0 || c.Drain > MaxDrain {
		errs = append(errs, fmt.Errorf("the drain must be within 0s..%v, got %v", MaxDrain, c.Drain))
	}
	if c.ShutdownDelay < 0 || c.ShutdownDelay > MaxShutdownDelay {
		errs = append(errs, fmt.Errorf("the shutdown delay must be within 0s..%v, got %v", MaxShutdownDelay, c.ShutdownDelay))
	}
	if c.Drain > 0 && c.Drain >= c.Wait {
		errs = append(errs, fmt.Errorf("the drain (%v) must be shorter than the wait for a leader (%v): connections that arrive during a drain wait for the next leader", c.Drain, c.Wait))
	}
	if c.MaxConnections < 1 || c.MaxConnections > MaxConnectionsLimit {
		errs = append(errs, fmt.Errorf("the connection cap must be within 1..%d, got %d", MaxConnectionsLimit, c.MaxConnections))
	}
	if err := CheckUpstream(c.Upstream); err != nil {
		errs = append(errs, err)
	}
	if _, err := peerPort(c.PeerAddress); err != nil {
		errs = append(errs, err)
	}
	if c.Leadership == nil || c.Resolver == nil {
		errs = append(errs, errors.New("the proxy needs the leadership and a resolver"))
	}
	return errors.Join(errs...)
}

// CheckUpstream refuses an upstream that is not a loopback IP and a port:
// the leader forwards to its own app, never across the network.
func CheckUpstream(upstream string) error {
	host, port, err := net.SplitHostPort(upstream)
	if err != nil {
		return fmt.Errorf("upstream %q is not host:port: %w", upstream, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("upstream %q must be a loopback IP address (the app in this pod), e.g. 127.0.0.1:%s", upstream, port)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("upstream %q: the port must be within 1..65535", upstream)
	}
	return nil
}

// peerPort is the port of the peer address, which followers dial.
func peerPort(addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("peer address %q is not host:port: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("peer address %q: the port must be within 1..65535 (followers dial it)", addr)
	}
	return port, nil
}

// Proxy forwards connections to the leader's app.
type Proxy struct {
	cfg      Config
	peerPort string
	dialer   interface {
		DialContext(ctx context.Context, network, address string) (net.Conn, error)
	}
	public, peer net.Listener
	routes       *routes
	metrics      *Metrics
	failures     failureLog
	wg           sync.WaitGroup
}

// Listen validates cfg and opens both listeners, so that an address in use
// fails the start.
func Listen(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	port, _ := peerPort(cfg.PeerAddress)
	public, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("proxy: %w", err)
	}
	peer, err := net.Listen("tcp", cfg.PeerAddress)
	if err != nil {
		_ = public.Close()
		return nil, fmt.Errorf("proxy peer port: %w", err)
	}
	p := &Proxy{cfg: cfg, peerPort: port, dialer: cfg.Dialer, public: public, peer: peer, metrics: newMetrics()}
	if p.dialer == nil {
		p.dialer = &net.Dialer{}
	}
	p.routes = newRoutes(p.metrics)
	p.failures.sometimes.Interval = failureLogInterval
	p.failures.gaveUp.Interval = failureLogInterval
	p.failures.logger = klog.Background()
	return p, nil
}

// Addr is the clients' listener's address; PeerAddr the peer port's.
func (p *Proxy) Addr() net.Addr     { return p.public.Addr() }
func (p *Proxy) PeerAddr() net.Addr { return p.peer.Addr() }

// Run follows the election and serves both listeners until ctx ends, then
// closes the listeners and every connection, and returns once all are
// closed.
func (p *Proxy) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithName("proxy")
	ctx = klog.NewContext(ctx, logger)
	p.failures.logger = logger
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		p.follow(ctx)
	}()
	var serving sync.WaitGroup
	serving.Add(2)
	go func() { defer serving.Done(); p.acceptLoop(ctx, p.public, p.serveClient) }()
	go func() { defer serving.Done(); p.acceptLoop(ctx, p.peer, p.servePeer) }()
	<-ctx.Done()
	_ = p.public.Close()
	_ = p.peer.Close()
	serving.Wait()
	<-followDone
	p.routes.closeAll()
	p.wg.Wait()
}

// follow keeps the current route in step with the election, and resolves
// a new remote leader's address ahead of the first connection to it.
func (p *Proxy) follow(ctx context.Context) {
	for {
		s, changed := p.cfg.Leadership.Watch()
		r := routeOf(s)
		if p.routes.set(r) && r.kind == routeRemote {
			go func() { _, _ = p.cfg.Resolver.Resolve(ctx, r.holder, r.token) }()
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// Quiesce prepares a graceful end of this pod's term token (a release, a
// step-down, a handover): new connections wait for the next leader (the
// peer port refuses followers, which retry), and it returns once every
// connection forwarded to this pod's app in that term has ended, after
// cfg.Drain at the latest, or when ctx ends, having closed those still
// open. The pod still leads meanwhile, so nothing of the term reaches the
// app after the term: a request on a connection that ends within the
// drain is answered in it, one in flight when the drain runs out is cut.
// It returns at once if this pod does not lead in that term, or with no
// drain. The function it returns undoes it, for a release that did not
// happen: the term goes on taking connections.
func (p *Proxy) Quiesce(ctx context.Context, token int64) (resume func()) {
	if p.cfg.Drain <= 0 {
		return func() {}
	}
	r, ok := p.routes.quiesce(token)
	if !ok {
		return func() {}
	}
	resume = func() {
		// Only while this pod still leads that term: a release that did
		// not happen because another one is ending the term must not
		// reopen it.
		if s, _ := p.cfg.Leadership.Watch(); s.IsLeader && s.FencingToken == token {
			p.routes.resume(r)
		}
	}
	timer := time.NewTimer(p.cfg.Drain)
	defer timer.Stop()
	for {
		n, removed := p.routes.open(r)
		if n == 0 {
			p.metrics.drains.WithLabelValues(drainEnded).Inc()
			return resume
		}
		select {
		case <-removed:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		// The drain ran out: close the rest now, while the pod still
		// leads. Left to the term's end, a connection kept alive would
		// carry requests to the app in the moment between the claim's
		// end and this proxy seeing it.
		p.routes.closeRoute(r)
		p.metrics.drains.WithLabelValues(drainCut).Inc()
		return resume
	}
}

// acceptLoop accepts on l until it is closed, holding each listener to
// the connection cap.
func (p *Proxy) acceptLoop(ctx context.Context, l net.Listener, serve func(context.Context, net.Conn)) {
	limit := make(chan struct{}, p.cfg.MaxConnections)
	for {
		c, err := l.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		select {
		case limit <- struct{}{}:
		default:
			p.metrics.refused.WithLabelValues(refusedCap).Inc()
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			defer func() { <-limit }()
			serve(ctx, c)
		}()
	}
}
