//go:build integration

package node_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// faultProxy stands between pods and the API server for the soak's
// network faults that iptables alone cannot make: latency and jitter, slow
// answers, and connections cut under a watch. The kernel here has no netem
// qdisc, so the delay is made in user space: a pod's API traffic is
// redirected (a DNAT rule ahead of kube-proxy's) to this TCP proxy, which
// forwards the bytes unchanged (TLS passes through: the pod still verifies
// the API server's certificate for the address it dialled) and delays or
// cuts them by the profile set for the pod's IP.
type faultProxy struct {
	ln     net.Listener
	target string // the API server's host:port
	port   int

	mu       sync.Mutex
	profiles map[string]proxyProfile // by pod IP
	conns    map[string]map[net.Conn]struct{}
	rng      *rand.Rand
}

// proxyProfile is how a pod's connections are degraded.
type proxyProfile struct {
	// latency and jitter delay every chunk, each way: latency plus up to
	// jitter more, without reordering (a chunk never overtakes the one
	// before it, as on a TCP stream).
	latency, jitter time.Duration
	// slow delays the API server's answers only, by slow plus up to
	// jitter.
	slow time.Duration
	// cutAfter, when set, closes each connection after a lifetime drawn
	// from [cutAfter[0], cutAfter[1]): every watch on it ends, and the
	// client reconnects (through the proxy again while the fault holds).
	cutAfter [2]time.Duration
}

func startFaultProxy(listenHost, target string, seed uint64) (*faultProxy, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(listenHost, "0"))
	if err != nil {
		return nil, err
	}
	p := &faultProxy{
		ln: ln, target: target, port: ln.Addr().(*net.TCPAddr).Port,
		profiles: map[string]proxyProfile{}, conns: map[string]map[net.Conn]struct{}{},
		rng: rand.New(rand.NewPCG(seed, seed^0xfa017)),
	}
	go p.serve()
	return p, nil
}

func (p *faultProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for ip := range p.conns {
		p.closeConnsLocked(ip)
	}
}

// degrade sends podIP's API traffic through the proxy with profile: the
// DNAT rule catches new connections, and deleting the pod's connection
// tracking entries moves its open ones (their next packet reaches the
// proxy, which knows no such connection and resets it, so the client
// reconnects through the proxy). undo restores the direct path the same
// way.
func (p *faultProxy) degrade(podIP string, svc string, svcPort int, profile proxyProfile) (undo func() error, err error) {
	p.mu.Lock()
	if _, busy := p.profiles[podIP]; busy {
		p.mu.Unlock()
		// Two proxy faults on one pod would share one DNAT rule's
		// effect and misreport both: the second is not injected.
		return nil, fmt.Errorf("%s: its API traffic is already degraded", podIP)
	}
	p.profiles[podIP] = profile
	p.mu.Unlock()
	rule := []string{"PREROUTING", "-t", "nat", "-s", podIP, "-d", svc, "-p", "tcp", "--dport", strconv.Itoa(svcPort),
		"-j", "DNAT", "--to-destination", net.JoinHostPort(p.listenIP(), strconv.Itoa(p.port))}
	if err := iptables(append([]string{"-I"}, rule...)...); err != nil {
		p.forget(podIP)
		return nil, err
	}
	if err := forgetConnections(podIP); err != nil {
		_ = iptables(append([]string{"-D"}, rule...)...)
		p.forget(podIP)
		return nil, err
	}
	return func() error {
		err := iptables(append([]string{"-D"}, rule...)...)
		p.forget(podIP)
		return errors.Join(err, forgetConnections(podIP))
	}, nil
}

// forget drops podIP's profile and closes its proxied connections.
func (p *faultProxy) forget(podIP string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.profiles, podIP)
	p.closeConnsLocked(podIP)
}

func (p *faultProxy) listenIP() string { return p.ln.Addr().(*net.TCPAddr).IP.String() }

// forgetConnections deletes the connection tracking entries of the
// connections podIP opened, so that their next packets are routed (and
// NATed) anew.
func forgetConnections(podIP string) error {
	out, err := exec.Command("conntrack", "-D", "-s", podIP, "-p", "tcp").CombinedOutput()
	// conntrack exits 1 when there was nothing to delete.
	if err != nil && !strings.Contains(string(out), "0 flow entries have been deleted") {
		return fmt.Errorf("conntrack -D -s %s: %v: %s", podIP, err, out)
	}
	return nil
}

func (p *faultProxy) closeConnsLocked(ip string) {
	for c := range p.conns[ip] {
		_ = c.Close()
	}
	delete(p.conns, ip)
}

func (p *faultProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *faultProxy) handle(client net.Conn) {
	ip := client.RemoteAddr().(*net.TCPAddr).IP.String()
	p.mu.Lock()
	profile, ok := p.profiles[ip]
	var lifetime time.Duration
	if ok && profile.cutAfter[1] > 0 {
		lifetime = profile.cutAfter[0] + time.Duration(p.rng.Int64N(int64(profile.cutAfter[1]-profile.cutAfter[0])+1))
	}
	seed := p.rng.Uint64()
	p.mu.Unlock()
	if !ok {
		// A connection that arrives after its pod's fault healed (the
		// DNAT rule is gone, but the SYN was on its way): refuse it,
		// the client reconnects on the direct path.
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if _, still := p.profiles[ip]; !still {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	if p.conns[ip] == nil {
		p.conns[ip] = map[net.Conn]struct{}{}
	}
	p.conns[ip][client], p.conns[ip][server] = struct{}{}, struct{}{}
	p.mu.Unlock()

	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			_ = client.Close()
			_ = server.Close()
			p.mu.Lock()
			delete(p.conns[ip], client)
			delete(p.conns[ip], server)
			p.mu.Unlock()
		})
	}
	if lifetime > 0 {
		t := time.AfterFunc(lifetime, closeBoth)
		defer t.Stop()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0xde1a7))
	var rngMu sync.Mutex
	delay := func(extra time.Duration) func() time.Duration {
		return func() time.Duration {
			rngMu.Lock()
			defer rngMu.Unlock()
			d := profile.latency + extra
			if profile.jitter > 0 {
				d += time.Duration(rng.Int64N(int64(profile.jitter)))
			}
			return d
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { delayedCopy(server, client, delay(0)); closeBoth() })
	wg.Go(func() { delayedCopy(client, server, delay(profile.slow)); closeBoth() })
	wg.Wait()
}

// delayedCopy copies src to dst, holding each chunk until its due time:
// when it was read plus delay(), but never before the chunk ahead of it.
func delayedCopy(dst io.Writer, src io.Reader, delay func() time.Duration) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			if _, err := dst.Write(c.b); err != nil {
				// Drain, so the reader is never blocked on a full
				// queue after the writer gave up.
				for range queue {
				}
				return
			}
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			due := time.Now().Add(delay())
			if due.Before(last) {
				due = last
			}
			last = due
			queue <- chunk{append([]byte(nil), buf[:n]...), due}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	<-done
}
