package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leadership/leadershiptest"
	"github.com/leader-elector/leader-elector/proxy"
)

// proxyCommand runs the benchmark as the proxy under test, alone in its
// process so that its resident memory is its own: `bench proxy-under-test
// UPSTREAM`. It leads one term for good, prints its client address, and
// runs until its stdin closes.
const proxyCommand = "proxy-under-test"

// The upstream's modes, chosen by a connection's first byte.
const (
	modeEcho = 'E' // answer every message with itself
	modeSink = 'S' // read and drop everything, then answer one byte
)

// Direct and proxied measurements alternate, in blocks, so that the load
// of a shared machine falls on both alike.
const (
	latencyBlocks    = 10
	throughputRounds = 5
)

// interleaved measures n samples on each address, alternating in blocks.
func interleaved(direct, proxied string, n int, run func(addr string, n int) ([]time.Duration, error)) (d, p []time.Duration, err error) {
	for range latencyBlocks {
		for _, x := range []struct {
			addr string
			into *[]time.Duration
		}{{direct, &d}, {proxied, &p}} {
			got, err := run(x.addr, n/latencyBlocks)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", x.addr, err)
			}
			*x.into = append(*x.into, got...)
		}
	}
	return d, p, nil
}

// proxyMessage is the size of one request and of its answer.
const proxyMessage = 64

func runProxyUnderTest(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: bench proxy-under-test UPSTREAM MAX-CONNECTIONS")
		return 2
	}
	maxConns, err := strconv.Atoi(args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	peerAddr := peer.Addr().String()
	_ = peer.Close()
	source := leadershiptest.NewSource(leadership.State{Identity: "bench", Holder: "bench", IsLeader: true, FencingToken: 1})
	p, err := proxy.Listen(proxy.Config{
		Address: "127.0.0.1:0", PeerAddress: peerAddr, Upstream: args[0],
		Wait: 10 * time.Second, MaxConnections: maxConns,
		Leadership: source, Resolver: noResolver{},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Println(p.Addr().String())
	p.Run(ctx)
	return 0
}

// noResolver: the proxy under test leads, and never resolves a leader.
type noResolver struct{}

func (noResolver) Resolve(context.Context, string, int64) (string, error) {
	return "", errors.New("the benchmark's proxy leads")
}

// proxyOptions are the proxy benchmark's counts.
type proxyOptions struct {
	Samples, NewConnSamples, Conns int
	// IdleClients connect to a proxy with the default cap and send nothing.
	IdleClients int
	Bytes       int64
	// HAProxy, when set, is an HAProxy binary measured beside the proxy
	// (startHAProxy): what a mature L4 proxy costs on the same machine.
	HAProxy string
}

// runProxy measures the proxy against a direct connection to the same
// upstream on loopback: added latency, throughput, and the proxy
// process's memory with Conns connections open.
func runProxy(ctx context.Context, opts *options) error {
	upstream, err := startUpstream()
	if err != nil {
		return err
	}
	defer upstream.Close()
	proxyAddr, stop, pid, err := startProxyUnderTest(ctx, upstream.Addr().String(), proxy.MaxConnectionsLimit)
	if err != nil {
		return err
	}
	defer stop()
	direct := upstream.Addr().String()
	var haAddr string
	if opts.Proxy.HAProxy != "" {
		var stopHA func()
		if haAddr, stopHA, err = startHAProxy(ctx, opts.Proxy.HAProxy, direct); err != nil {
			return err
		}
		defer stopHA()
	}
	var rows []string
	for _, m := range []struct {
		name    string
		samples int
		run     func(addr string, n int) ([]time.Duration, error)
	}{
		{"round trip of 64 bytes, one keep-alive connection", opts.Proxy.Samples, keepAliveRTT},
		{"new connection + round trip of 64 bytes", opts.Proxy.NewConnSamples, newConnRTT},
	} {
		d, p, err := interleaved(direct, proxyAddr, m.samples, m.run)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
		rows = append(rows, fmt.Sprintf("| %s | p50 %s, p99 %s | p50 %s, p99 %s | p50 %s, p99 %s |", m.name,
			pct(d, 50), pct(d, 99), pct(p, 50), pct(p, 99), signed(pct(p, 50)-pct(d, 50)), signed(pct(p, 99)-pct(d, 99))))
	}
	var dts, pts, hts []float64
	targets := []struct {
		addr string
		into *[]float64
	}{{direct, &dts}, {proxyAddr, &pts}}
	if haAddr != "" {
		targets = append(targets, struct {
			addr string
			into *[]float64
		}{haAddr, &hts})
	}
	for range throughputRounds {
		for _, x := range targets {
			v, err := throughput(x.addr, opts.Proxy.Bytes/throughputRounds)
			if err != nil {
				return fmt.Errorf("throughput to %s: %w", x.addr, err)
			}
			*x.into = append(*x.into, v)
		}
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	dt, pt := median(dts), median(pts)
	rows = append(rows, fmt.Sprintf("| throughput, %d MiB one way in %d rounds (median) | %.0f MiB/s | %.0f MiB/s | ratio %.2f |", opts.Proxy.Bytes>>20, throughputRounds, dt, pt, pt/dt))
	if haAddr != "" {
		// The same rounds, interleaved with the two above: the reference
		// for what any L4 proxy that relays on loopback costs here.
		ht := median(hts)
		rows = append(rows, fmt.Sprintf("| throughput through HAProxy (mode tcp, splice), the same rounds (median) | %.0f MiB/s | HAProxy: %.0f MiB/s | ratio %.2f (the proxy: %.2f of HAProxy's) |", dt, ht, ht/dt, pt/ht))
	}
	before, after, err := memoryWithConns(pid, proxyAddr, opts.Proxy.Conns)
	if err != nil {
		return err
	}
	rows = append(rows, fmt.Sprintf("| proxy process VmRSS (anonymous), %d connections open | idle: %.1f MiB (%.1f) | %.1f MiB (%.1f) | +%.1f MiB (+%.1f anonymous) |",
		opts.Proxy.Conns, inMiB(before.rss), inMiB(before.anon), inMiB(after.rss), inMiB(after.anon), inMiB(after.rss)-inMiB(before.rss), inMiB(after.anon)-inMiB(before.anon)))
	row, err := idleClientsOverTheCap(ctx, upstream.Addr().String(), opts.Proxy.IdleClients)
	if err != nil {
		return err
	}
	rows = append(rows, row)
	table := "| loopback, " + fmt.Sprint(opts.Proxy.Samples) + " samples | direct | through the proxy | proxy's cost |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	fmt.Print(table)
	if opts.Output != "" {
		return os.WriteFile(opts.Output, []byte(table), 0o644)
	}
	return nil
}

// signed shows a difference with its sign: on a busy machine a p99 can
// come out lower through the proxy than direct.
func signed(d time.Duration) string {
	if d < 0 {
		return d.String()
	}
	return "+" + d.String()
}

func inMiB(b uint64) float64 { return float64(b) / (1 << 20) }

// pct is the p-th percentile of ds (sorted here), rounded to the µs.
func pct(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	return ds[(len(ds)-1)*p/100].Round(time.Microsecond)
}

// startProxyUnderTest starts the proxy in a process of its own.
func startProxyUnderTest(ctx context.Context, upstream string, maxConns int) (addr string, stop func(), pid int, err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, 0, err
	}
	cmd := exec.CommandContext(ctx, self, proxyCommand, upstream, strconv.Itoa(maxConns))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, 0, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, 0, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, 0, err
	}
	stop = func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, 0, fmt.Errorf("proxy under test: %w", err)
	}
	return strings.TrimSpace(line), stop, cmd.Process.Pid, nil
}

// startHAProxy runs HAProxy in TCP mode in front of upstream, on a free
// loopback port, with kernel splicing both ways (as the proxy splices),
// until stop. It is the benchmark's reference: what a mature L4 proxy costs
// on the same machine, in the same interleaved rounds.
func startHAProxy(ctx context.Context, bin, upstream string) (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr = l.Addr().String()
	_ = l.Close()
	dir, err := os.MkdirTemp("", "bench-haproxy-")
	if err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf(`global
    maxconn 4096
defaults
    mode tcp
    timeout connect 5s
    timeout client 1m
    timeout server 1m
    option splice-request
    option splice-response
listen bench
    bind %s
    server upstream %s
`, addr, upstream)
	path := dir + "/haproxy.cfg"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "-db", "-f", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("haproxy: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		_ = os.RemoveAll(dir)
	}
	// Ready once it accepts and forwards: an echo round trip.
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			_ = os.RemoveAll(dir)
			return "", nil, fmt.Errorf("haproxy exited at its start (%v); its errors are above", err)
		default:
		}
		c, err := dialEcho(addr)
		if err == nil {
			err = roundTrip(c, make([]byte, proxyMessage))
			_ = c.Close()
		}
		if err == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("haproxy at %s not forwarding after 10s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startUpstream serves echo and sink connections (the first byte says
// which) until closed.
func startUpstream() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go serveUpstream(c)
		}
	}()
	return l, nil
}

func serveUpstream(c net.Conn) {
	defer c.Close()
	var mode [1]byte
	if _, err := io.ReadFull(c, mode[:]); err != nil {
		return
	}
	if mode[0] == modeSink {
		// Large reads: io.Discard's ReadFrom reads 8 KiB at a time.
		buf := make([]byte, 256<<10)
		for {
			if _, err := c.Read(buf); err != nil {
				break
			}
		}
		_, _ = c.Write([]byte{1})
		return
	}
	buf := make([]byte, proxyMessage)
	for {
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if _, err := c.Write(buf); err != nil {
			return
		}
	}
}

// dialEcho connects in echo mode.
func dialEcho(addr string) (net.Conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{modeEcho}); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// roundTrip sends one message and reads its echo.
func roundTrip(c net.Conn, buf []byte) error {
	if _, err := c.Write(buf); err != nil {
		return err
	}
	_, err := io.ReadFull(c, buf)
	return err
}

func keepAliveRTT(addr string, n int) ([]time.Duration, error) {
	c, err := dialEcho(addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	buf := make([]byte, proxyMessage)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := roundTrip(c, buf); err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

func newConnRTT(addr string, n int) ([]time.Duration, error) {
	buf := make([]byte, proxyMessage)
	out := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		c, err := dialEcho(addr)
		if err != nil {
			return nil, err
		}
		err = roundTrip(c, buf)
		_ = c.Close()
		if err != nil {
			return nil, err
		}
		out = append(out, time.Since(start))
	}
	return out, nil
}

// throughput sends n bytes one way and waits for the sink's receipt; it
// returns MiB/s.
func throughput(addr string, n int64) (float64, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	buf[0] = modeSink
	start := time.Now()
	if _, err := c.Write(buf[:1]); err != nil {
		return 0, err
	}
	for sent := int64(0); sent < n; sent += int64(len(buf)) {
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return 0, err
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		return 0, err
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds(), nil
}

// memoryWithConns reads the proxy's memory, opens n connections through
// it (each has forwarded one message, so both of its copies run), reads
// it again, and closes them.
func memoryWithConns(pid int, addr string, n int) (before, after memory, err error) {
	if before, err = residentMemory(pid); err != nil {
		return before, after, err
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	buf := make([]byte, proxyMessage)
	for range n {
		c, err := dialEcho(addr)
		if err != nil {
			return before, after, fmt.Errorf("connection %d of %d: %w", len(conns)+1, n, err)
		}
		conns = append(conns, c)
		if err := roundTrip(c, buf); err != nil {
			return before, after, err
		}
	}
	time.Sleep(time.Second)
	after, err = residentMemory(pid)
	return before, after, err
}

// idleCap is the default --proxy-max-connections, which the idle clients
// run against.
const idleCap = 1024

// idleClientsOverTheCap opens n idle connections (they send nothing) to a
// proxy capped at idleCap, and reports how many it closed at once and its
// memory before and after.
func idleClientsOverTheCap(ctx context.Context, upstream string, n int) (string, error) {
	addr, stop, pid, err := startProxyUnderTest(ctx, upstream, idleCap)
	if err != nil {
		return "", err
	}
	defer stop()
	before, err := residentMemory(pid)
	if err != nil {
		return "", err
	}
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return "", fmt.Errorf("idle client %d of %d: %w", len(conns)+1, n, err)
		}
		conns = append(conns, c)
	}
	time.Sleep(time.Second)
	after, err := residentMemory(pid)
	if err != nil {
		return "", err
	}
	closed := 0
	var b [1]byte
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Read(b[:]); err != nil && !os.IsTimeout(err) {
			closed++
		}
	}
	return fmt.Sprintf("| %d idle clients, cap %d: VmRSS (anonymous) | before: %.1f MiB (%.1f) | with them: %.1f MiB (%.1f); %d closed at once | +%.1f MiB |",
		n, idleCap, inMiB(before.rss), inMiB(before.anon), inMiB(after.rss), inMiB(after.anon), closed, inMiB(after.rss)-inMiB(before.rss)), nil
}
