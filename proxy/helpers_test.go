package proxy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leadership/leadershiptest"
)

// schedulingSlack is the delay between an event and its observation on a
// loaded 2-core machine under the race detector (docs/development.md,
// "Timing bounds in tests").
const schedulingSlack = 500 * time.Millisecond

// testWait is the proxies' wait for a leader in these tests.
const testWait = 400 * time.Millisecond

// echoApp is the app behind a proxy: it answers each line with its pod's
// name, and records its connections.
type echoApp struct {
	name string
	l    net.Listener
	// accepted counts the connections; open those not yet closed.
	accepted, open atomic.Int64

	mu sync.Mutex
	// conns are the connections' accept and close times (zero: open).
	conns []*appConn
}

// appConn is one connection the app served.
type appConn struct{ accepted, closed time.Time }

func (a *echoApp) history() []appConn {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]appConn, len(a.conns))
	for i, c := range a.conns {
		out[i] = *c
	}
	return out
}

func startEchoApp(t *testing.T, name string) *echoApp {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &echoApp{name: name, l: l}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			a.accepted.Add(1)
			a.open.Add(1)
			rec := &appConn{accepted: time.Now()}
			a.mu.Lock()
			a.conns = append(a.conns, rec)
			a.mu.Unlock()
			go func() {
				defer a.open.Add(-1)
				defer func() {
					a.mu.Lock()
					rec.closed = time.Now()
					a.mu.Unlock()
				}()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := fmt.Fprintln(c, a.name); err != nil {
						return
					}
				}
			}()
		}
	}()
	return a
}

// countingDialer counts the dials to each address.
type countingDialer struct {
	mu    sync.Mutex
	dials map[string]int
}

func (d *countingDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	if d.dials == nil {
		d.dials = map[string]int{}
	}
	d.dials[address]++
	d.mu.Unlock()
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *countingDialer) count(address string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dials[address]
}

func (d *countingDialer) snapshot() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]int{}
	for a, n := range d.dials {
		out[a] = n
	}
	return out
}

func (d *countingDialer) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, c := range d.dials {
		n += c
	}
	return n
}

// mapResolver resolves each pod name to its loopback IP.
type mapResolver map[string]string

func (m mapResolver) Resolve(_ context.Context, holder string, _ int64) (string, error) {
	if ip, ok := m[holder]; ok {
		return ip, nil
	}
	return "", fmt.Errorf("no pod %s", holder)
}

// pod is one candidate: its election, app and proxy.
type pod struct {
	name   string
	ip     string
	source *leadershiptest.Source
	app    *echoApp
	proxy  *Proxy
	dialer *countingDialer
}

// cluster is pods on loopback IPs 127.0.0.2.., their peer ports all on
// one port, as on a Kubernetes network.
type cluster struct {
	pods     map[string]*pod
	resolver mapResolver
	peerPort string
}

// newCluster starts one pod per name, none leading; cfg gives each
// proxy's timings and cap.
func newCluster(t *testing.T, cfg Config, names ...string) *cluster {
	t.Helper()
	c := &cluster{pods: map[string]*pod{}, resolver: mapResolver{}}
	for i, name := range names {
		c.resolver[name] = fmt.Sprintf("127.0.0.%d", i+2)
	}
	for attempt := 0; ; attempt++ {
		if err := c.start(t, cfg, names); err == nil {
			return c
		} else if attempt == 5 {
			t.Fatalf("no port free on every pod's IP: %v", err)
		}
	}
}

// start picks a free port on the first IP and starts every pod's proxy
// with it as the peer port.
func (c *cluster) start(t *testing.T, cfg Config, names []string) error {
	l, err := net.Listen("tcp", c.resolver[names[0]]+":0")
	if err != nil {
		t.Fatal(err)
	}
	_, c.peerPort, _ = net.SplitHostPort(l.Addr().String())
	_ = l.Close()
	var started []*Proxy
	for _, name := range names {
		p := &pod{name: name, ip: c.resolver[name], app: startEchoApp(t, name), dialer: &countingDialer{}}
		p.source = leadershiptest.NewSource(leadership.State{Identity: name})
		pc := cfg
		pc.Address, pc.PeerAddress, pc.Upstream = p.ip+":0", net.JoinHostPort(p.ip, c.peerPort), p.app.l.Addr().String()
		pc.Leadership, pc.Resolver, pc.Dialer = p.source, c.resolver, p.dialer
		if p.proxy, err = Listen(pc); err != nil {
			for _, s := range started {
				_ = s.public.Close()
				_ = s.peer.Close()
			}
			return err
		}
		started = append(started, p.proxy)
		c.pods[name] = p
	}
	for _, p := range c.pods {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); p.proxy.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return nil
}

// lead makes leader the holder of term token in every pod's view ("" for
// no holder), in the order given by order (default: the pods' map order).
func (c *cluster) lead(leader string, token int64, order ...string) {
	if len(order) == 0 {
		for name := range c.pods {
			order = append(order, name)
		}
	}
	for _, name := range order {
		c.pods[name].source.Set(func(s *leadership.State) {
			s.Holder, s.FencingToken, s.IsLeader = leader, token, leader == s.Identity
		})
	}
}

// ask sends a line on conn and returns the answer, within the deadline.
func ask(conn net.Conn, r *bufio.Reader, deadline time.Duration) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(deadline))
	if _, err := fmt.Fprintln(conn, "who?"); err != nil {
		return "", err
	}
	line, err := r.ReadString('\n')
	return strings.TrimSpace(line), err
}

// dial connects to a pod's proxy.
func (c *cluster) dial(t *testing.T, name string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", c.pods[name].proxy.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn, bufio.NewReader(conn)
}

// waitClosed waits until the proxy has closed conn, and returns when.
func waitClosed(t *testing.T, conn net.Conn, r *bufio.Reader, within time.Duration) time.Time {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(within))
	for {
		if _, err := r.ReadByte(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection is still open after %v", within)
			}
			return time.Now()
		}
	}
}

// leadershipState is leadership.State, short for the tests' setters.
type leadershipState = leadership.State

func bufioReader(conn net.Conn) *bufio.Reader { return bufio.NewReader(conn) }
