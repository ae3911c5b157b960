//go:build integration

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
)

// What the probe port must withstand (issue 11): connections anyone in the
// cluster can open, held idle, must neither push the sidecar towards its
// memory limit (64 Mi in the examples) nor keep the kubelet's probes from
// being answered.
const (
	// attackConnections are opened one after the other and kept open.
	attackConnections = 5000
	// Every silentEvery-th attack connection sends nothing; the others send
	// one GET /readyz, read the answer and stay open.
	silentEvery = 5
	// A kubelet-like probe (a fresh connection, no keep-alive) is timed
	// after every probeEvery attack connections, and probesWhileHeld more
	// once all of them are open.
	probeEvery      = 50
	probesWhileHeld = 100
	// The bounds.
	maxRSSGrowth    = 4 << 20
	maxProbeLatency = 100 * time.Millisecond
)

// TestProbePortUnderIdleConnections opens 5,000 connections to the probe
// port of a real sidecar and keeps them open: its peak resident memory may
// grow by at most 4 MiB, and /readyz and /healthz, asked on fresh
// connections as the kubelet does, must be answered within 100 ms all
// along, including while the silent connections fill the probe server's
// connection cap.
//
// It runs a build without the race detector, which is what ships: the race
// detector's shadow memory would be most of what is measured.
func TestProbePortUnderIdleConnections(t *testing.T) {
	raiseOpenFileLimit(t, attackConnections+1024)
	c := startCandidate(t, "probe-port", candidateOptions{
		lease:  leaseName(t),
		binary: productionBinary(t),
		// As in the shipped pod templates (limits.memory 64Mi).
		env: []string{"GOMEMLIMIT=64MiB"},
	})
	probes := &http.Client{
		Timeout: 5 * time.Second,
		// The kubelet opens a new connection for every probe.
		Transport: &http.Transport{DisableKeepAlives: true},
	}
	waitReady(t, probes, c.probeURL)
	pid := c.h.Pid()
	warmUp(t, c, probes)
	baseline := procStatusKiB(t, pid, "VmRSS")
	resetPeakRSS(t, pid)

	addr := strings.TrimPrefix(c.probeURL, "http://")
	var held []net.Conn
	defer func() {
		for _, conn := range held {
			conn.Close()
		}
	}()
	var latencies []time.Duration
	paths := []string{"/readyz", "/healthz"}
	for i := range attackConnections {
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("attack connection %d: %v", i, err)
		}
		held = append(held, conn)
		if i%silentEvery != 0 {
			if err := askOnce(conn); err != nil {
				t.Fatalf("attack connection %d: %v", i, err)
			}
		}
		if i%probeEvery == probeEvery-1 {
			latencies = append(latencies, timeProbe(t, probes, c.probeURL+paths[len(latencies)%2]))
		}
	}
	for range probesWhileHeld {
		latencies = append(latencies, timeProbe(t, probes, c.probeURL+paths[len(latencies)%2]))
	}
	status, metrics, err := c.probe("/metrics")
	if err != nil || status != http.StatusOK {
		t.Errorf("GET /metrics while the connections are held: %d, %v", status, err)
	}
	peak := procStatusKiB(t, pid, "VmHWM")
	growth := float64(peak-baseline) / 1024

	slices.Sort(latencies)
	p50, p99 := percentile(latencies, 50), percentile(latencies, 99)
	evicted := metricValue(metrics, "leader_elector_probe_connections_evicted_total")
	t.Logf("MEASURED probe port under %d idle connections (1 in %d silent): rss growth %.1f MiB (peak %.1f MiB, baseline %.1f MiB), probe latency p50 %s p99 %s max %s over %d probes; evicted connections: %s",
		attackConnections, silentEvery, growth, float64(peak)/1024, float64(baseline)/1024,
		ms(p50), ms(p99), ms(latencies[len(latencies)-1]), len(latencies), evicted)
	// The silent connections outnumber the cap: the probes above were
	// answered while it was hit.
	if n, err := strconv.Atoi(evicted); err != nil || n == 0 {
		t.Errorf("evicted connections: %s, want some: the connection cap was never reached", evicted)
	}
	if growth*1024*1024 > maxRSSGrowth {
		t.Errorf("resident memory grew by %.1f MiB, want at most %d MiB", growth, maxRSSGrowth>>20)
	}
	if p99 > maxProbeLatency {
		t.Errorf("probe latency p99 %s, want at most %s", p99, maxProbeLatency)
	}
}

// warmUp sends ordinary probes until the Go runtime has collected garbage
// a few times. A freshly started sidecar has not yet filled the heap up to
// the garbage collector's goal (twice the live heap); any traffic, probes
// and scrapes included, soon does, so without this the baseline would be
// low by up to a few MiB that the attack did not cost.
func warmUp(t *testing.T, c *candidate, probes *http.Client) {
	t.Helper()
	collections := func() int {
		_, text, err := c.probe("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(metricValue(text, "go_gc_duration_seconds_count"))
		if err != nil {
			t.Fatalf("go_gc_duration_seconds_count in /metrics: %v", err)
		}
		return n
	}
	start := collections()
	for deadline := time.Now().Add(30 * time.Second); collections() < start+3; {
		if time.Now().After(deadline) {
			t.Fatal("warming up: the sidecar did not collect garbage 3 times in 30 s")
		}
		for range 20 {
			timeProbe(t, probes, c.probeURL+"/readyz")
		}
	}
}

// productionBinary builds leader-elector as it ships (no race detector).
func productionBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "leader-elector")
	if err := harness.BuildBinary(context.Background(), bin, harness.Build{}); err != nil {
		t.Fatalf("build leader-elector: %v", err)
	}
	return bin
}

// raiseOpenFileLimit makes room for need open files in this process and in
// the sidecars it starts (they inherit the limit).
func raiseOpenFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Fatalf("the open-file limit is %d (hard); this test needs %d: raise it (ulimit -Hn)", lim.Max, need)
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raise the open-file limit to %d: %v", need, err)
	}
}

// waitReady waits until /readyz answers 200: the candidate leads.
func waitReady(t *testing.T, client *http.Client, probeURL string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		resp, err := client.Get(probeURL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("%s/readyz never answered 200: %v", probeURL, err)
	}
}

// timeProbe asks url as the kubelet does and returns how long the answer
// took; anything but 200 fails the test.
func timeProbe(t *testing.T, client *http.Client, url string) time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("probe %s: %v", url, err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("probe %s: %s, %v", url, resp.Status, err)
	}
	return took
}

// askOnce sends one GET /readyz on conn and reads the whole answer, leaving
// the connection open.
func askOnce(conn net.Conn) error {
	if _, err := io.WriteString(conn, "GET /readyz HTTP/1.1\r\nHost: probe\r\n\r\n"); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// procStatusKiB reads a "<field>: <n> kB" line of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("/proc/%d/status %q: %v", pid, line, err)
			}
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}

// resetPeakRSS sets the process's peak resident memory (VmHWM) to its
// current resident memory (proc(5), clear_refs).
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS of %d: %v", pid, err)
	}
}

// percentile of sorted durations (nearest rank).
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// metricValue is the value of an unlabelled-by-the-test metric in a
// /metrics text, or "none" if the metric is absent.
func metricValue(text, name string) string {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			return line[strings.LastIndex(line, " ")+1:]
		}
	}
	return "none"
}
