package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// loadResult is one or more runs of the GET /leader load.
type loadResult struct {
	requests int64
	errors   int64
	elapsed  time.Duration
	p50, p99 time.Duration
	// serverCores and clientCores are the CPU used by the server and by
	// this process (the load generator) while measuring, in cores;
	// otherCores the rest of the machine's busy time: the kernel's softirq
	// work for loopback traffic, the control plane, any other process.
	serverCores, clientCores, otherCores float64
	hists                                []*histogram
}

func (r loadResult) rps() float64 { return float64(r.requests) / r.elapsed.Seconds() }

// combine merges runs into one result, as if they were one long run.
func combine(runs ...loadResult) loadResult {
	var out loadResult
	var server, client, other float64
	for _, r := range runs {
		out.requests += r.requests
		out.errors += r.errors
		out.elapsed += r.elapsed
		out.hists = append(out.hists, r.hists...)
		server += r.serverCores * r.elapsed.Seconds()
		client += r.clientCores * r.elapsed.Seconds()
		other += r.otherCores * r.elapsed.Seconds()
	}
	secs := out.elapsed.Seconds()
	out.serverCores, out.clientCores, out.otherCores = server/secs, client/secs, other/secs
	q := quantiles(out.hists, 0.50, 0.99)
	out.p50, out.p99 = q[0], q[1]
	return out
}

// sseRounds is how many load runs with SSE clients attached leader-elector
// gets.
const sseRounds = 2

// httpLoad measures GET /leader on one lone candidate (a leader) of each
// implementation, started for this purpose, with HTTPConns keep-alive
// connections: the implementations take turns, and leader-elector's runs
// with SSEClients /events streams attached sit between its runs without
// them, so that every figure comes from the same stretch of time and the
// drift of a shared machine does not pass for a difference.
func httpLoad(ctx context.Context, opts *options, cp *cluster.ControlPlane, work string, impls []*impl, results []*implResult) error {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", work, err)
	}
	leaders := make([]*candidate, len(impls))
	for i, im := range impls {
		lone := *im
		lone.prefix += "-http"
		g := newGroup(opts, cp, &lone, "bench-http-"+im.key, work)
		defer g.stopAll()
		c, err := g.start(ctx)
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second+opts.LeaseDuration, true, func(ctx context.Context) (bool, error) {
			s, err := c.API().Leader(ctx)
			return err == nil && s.IsLeader, nil
		})
		if err != nil {
			return fmt.Errorf("%s did not lead: %w", c.Name(), err)
		}
		leaders[i] = c
	}
	measure := func(i int, sse bool) error {
		im, c, res := impls[i], leaders[i], results[i]
		what := ""
		if sse {
			sseCtx, stopSSE := context.WithCancel(ctx)
			defer stopSSE()
			if err := attachSSE(sseCtx, c.APIURL()+"/events", opts.SSEClients); err != nil {
				return err
			}
			what = fmt.Sprintf(", %d SSE clients", opts.SSEClients)
		}
		r, err := runLoad(ctx, strings.TrimPrefix(c.APIURL(), "http://"), c.Pid(), opts.HTTPConns, opts.HTTPDuration)
		if err != nil {
			return fmt.Errorf("%s: %w", im.key, err)
		}
		logf("%s GET /leader, %d connections%s: %.0f req/s, p50 %v, p99 %v, %d errors; CPU: server %.2f cores, load generator %.2f, rest of the machine %.2f",
			im.key, opts.HTTPConns, what, r.rps(), r.p50, r.p99, r.errors, r.serverCores, r.clientCores, r.otherCores)
		if sse {
			res.httpSSERuns = append(res.httpSSERuns, r)
		} else {
			res.httpRuns = append(res.httpRuns, r)
		}
		return nil
	}
	for round := 0; round <= sseRounds; round++ {
		for i, im := range impls {
			if err := measure(i, false); err != nil {
				return err
			}
			if im.leaderElector && opts.SSEClients > 0 && round < sseRounds {
				if err := measure(i, true); err != nil {
					return err
				}
			}
		}
	}
	for _, res := range results {
		all := combine(undisturbed(res.httpRuns)...)
		res.http = &all
		if len(res.httpSSERuns) > 0 {
			all := combine(undisturbed(res.httpSSERuns)...)
			res.httpSSE = &all
		}
	}
	return nil
}

// disturbedCores is how much CPU the rest of the machine may use during a
// load run before the run counts as disturbed by other work: the load and
// the server need most of the two cores of the reference machine.
const disturbedCores = 0.25

// undisturbed returns the runs during which the rest of the machine stayed
// quiet, or all of them if none did. The notes list every run.
func undisturbed(runs []loadResult) []loadResult {
	var quiet []loadResult
	for _, r := range runs {
		if r.otherCores <= disturbedCores {
			quiet = append(quiet, r)
		}
	}
	if len(quiet) == 0 {
		return runs
	}
	return quiet
}

// histogram counts latencies in 1 µs buckets up to histogramSpan; slower
// requests are kept one by one.
type histogram struct {
	buckets []uint32
	slow    []time.Duration
}

const histogramSpan = 100 * time.Millisecond

func newHistogram() *histogram {
	return &histogram{buckets: make([]uint32, histogramSpan/time.Microsecond)}
}

func (h *histogram) add(d time.Duration) {
	if i := int(d / time.Microsecond); i < len(h.buckets) {
		h.buckets[i]++
		return
	}
	h.slow = append(h.slow, d)
}

// quantiles merges hs and returns the nearest-rank quantiles qs.
func quantiles(hs []*histogram, qs ...float64) []time.Duration {
	merged := newHistogram()
	var total int
	for _, h := range hs {
		for i, n := range h.buckets {
			merged.buckets[i] += n
			total += int(n)
		}
		merged.slow = append(merged.slow, h.slow...)
		total += len(h.slow)
	}
	sortDurations(merged.slow)
	out := make([]time.Duration, len(qs))
	for k, q := range qs {
		rank := rankOf(q, total)
		seen := 0
		found := false
		for i, n := range merged.buckets {
			seen += int(n)
			if seen >= rank {
				out[k] = time.Duration(i)*time.Microsecond + time.Microsecond/2
				found = true
				break
			}
		}
		if !found && rank-seen-1 < len(merged.slow) && rank > 0 {
			out[k] = merged.slow[rank-seen-1]
		}
	}
	return out
}

// runLoad keeps conns connections busy with GET /leader, one request at a
// time each, for a warm-up second and then for d, and reports the requests
// completed in d. It speaks HTTP/1.1 on raw connections with reused buffers,
// so that the load generator, sharing the machine's cores with the server,
// costs as little as possible.
func runLoad(ctx context.Context, addr string, serverPID, conns int, d time.Duration) (loadResult, error) {
	l := &load{
		addr:    addr,
		request: []byte("GET /leader HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: leader-elector-bench\r\nAccept: application/json\r\n\r\n"),
	}
	var wg sync.WaitGroup
	hists := make([]*histogram, conns)
	for w := range conns {
		hists[w] = newHistogram()
		wg.Add(1)
		go func(h *histogram) {
			defer wg.Done()
			l.connection(h)
		}(hists[w])
	}
	err := pause(ctx, loadWarmup)
	server0, err1 := cpuTicks(serverPID)
	client0, err2 := cpuTicks(os.Getpid())
	machine0, err5 := machineBusyTicks()
	l.measuring.Store(true)
	began := time.Now()
	if err == nil {
		err = pause(ctx, d)
	}
	l.stopped.Store(true)
	elapsed := time.Since(began)
	server1, err3 := cpuTicks(serverPID)
	client1, err4 := cpuTicks(os.Getpid())
	machine1, err6 := machineBusyTicks()
	wg.Wait()
	if err := errors.Join(err, l.firstErr, err1, err2, err3, err4, err5, err6); err != nil {
		return loadResult{}, err
	}
	q := quantiles(hists, 0.50, 0.99)
	cores := func(ticks uint64) float64 { return float64(ticks) / clockTicksPerSecond / elapsed.Seconds() }
	r := loadResult{
		requests: l.requests.Load(), errors: l.failures.Load(), elapsed: elapsed, p50: q[0], p99: q[1],
		serverCores: cores(server1 - server0),
		clientCores: cores(client1 - client0),
		hists:       hists,
	}
	r.otherCores = max(0, cores(machine1-machine0)-r.serverCores-r.clientCores)
	return r, nil
}

// load is one load run's connections: what they send, and what they
// count once measuring is set, until stopped is.
type load struct {
	addr    string
	request []byte

	measuring, stopped atomic.Bool
	requests, failures atomic.Int64
	// firstErr is the first connection's failure to connect.
	firstErr error
	errOnce  sync.Once
}

// connection sends requests one at a time on one connection (a new one
// when the server closes it) until stopped, and records each latency in h
// while measuring.
func (l *load) connection(h *histogram) {
	var conn net.Conn
	var br *bufio.Reader
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for !l.stopped.Load() {
		if conn == nil {
			c, err := net.Dial("tcp", l.addr)
			if err != nil {
				l.errOnce.Do(func() { l.firstErr = fmt.Errorf("connect to %s: %w", l.addr, err) })
				return
			}
			conn, br = c, bufio.NewReaderSize(c, 16<<10)
		}
		start := time.Now()
		_, err := conn.Write(l.request)
		status, keepAlive := 0, false
		if err == nil {
			status, keepAlive, err = readResponse(br)
		}
		took := time.Since(start)
		if l.measuring.Load() && !l.stopped.Load() {
			if err != nil || status != http.StatusOK {
				l.failures.Add(1)
			} else {
				l.requests.Add(1)
				h.add(took)
			}
		}
		if err != nil || !keepAlive {
			conn.Close()
			conn = nil
		}
	}
}

// loadWarmup runs before each measured load run: connections, goroutines and
// the server's heap settle.
const loadWarmup = 2 * time.Second

// readResponse reads one HTTP/1.1 response and discards its body. It returns
// the status and whether the connection may be reused.
func readResponse(br *bufio.Reader) (status int, keepAlive bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	if status, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keepAlive := -1, false, true
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keepAlive = !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		for {
			line, err := br.ReadSlice('\n')
			if err != nil {
				return 0, false, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(line, []byte(";"), 2)[0])), 16, 64)
			if err != nil {
				return 0, false, fmt.Errorf("bad chunk size %q", line)
			}
			if size == 0 {
				// Trailers, then the empty line.
				for {
					line, err := br.ReadSlice('\n')
					if err != nil {
						return 0, false, err
					}
					if len(bytes.TrimRight(line, "\r\n")) == 0 {
						return status, keepAlive, nil
					}
				}
			}
			if _, err := br.Discard(int(size) + 2); err != nil {
				return 0, false, err
			}
		}
	case length >= 0:
		if _, err := br.Discard(length); err != nil {
			return 0, false, err
		}
		return status, keepAlive, nil
	default:
		return 0, false, errors.New("response without length")
	}
}

// readSSE opens n /events streams that read (and drop) everything the
// server sends until ctx ends, and returns once each has received its first
// event. It runs in a process of its own (see attachSSE).
func readSSE(ctx context.Context, url string, n int) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
	ready := make(chan error, n)
	for range n {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				ready <- err
				return
			}
			resp, err := client.Do(req)
			if err != nil {
				ready <- fmt.Errorf("GET %s: %w", url, err)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				ready <- fmt.Errorf("GET %s: %s", url, resp.Status)
				return
			}
			br := bufio.NewReader(resp.Body)
			signalled := false
			for {
				line, err := br.ReadString('\n')
				if err != nil {
					if !signalled {
						ready <- fmt.Errorf("read %s: %w", url, err)
					}
					return
				}
				if !signalled && strings.HasPrefix(line, "event:") {
					ready <- nil
					signalled = true
				}
			}
		}()
	}
	deadline := time.NewTimer(30 * time.Second)
	defer deadline.Stop()
	for range n {
		select {
		case err := <-ready:
			if err != nil {
				return err
			}
		case <-deadline.C:
			return fmt.Errorf("%d SSE clients: not all received their first event within 30s", n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
