//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
)

// Timings used by the e2e tests: short, so that failovers take seconds, and
// with the same ratios as the defaults (lease > renew > 1.2 × retry).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// e2eTimings are the timings above, as the harness takes them.
var e2eTimings = harness.Timings{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod}

// candidate is one leader-elector process: a harness.Candidate bound to the
// test that started it, which fails on its errors.
type candidate struct {
	h        *harness.Candidate
	t        testing.TB
	name     string
	apiURL   string
	probeURL string
	done     <-chan struct{}
}

type candidateOptions struct {
	lease      string
	namespace  string
	kubeconfig string
	extraArgs  []string
	env        []string
	// bareArgs: pass only extraArgs (and env); the test configures
	// everything itself, on the ports it gives.
	bareArgs bool
	ports    []int
	// startedPath is the API path that answers 200 once the process
	// serves; "/leader" if empty.
	startedPath string
	// binary is the leader-elector to run; the race-detector build if
	// empty.
	binary string
}

// startCandidate starts leader-elector with the e2e timings and waits until
// its API answers. The process is killed when the test ends.
func startCandidate(t testing.TB, name string, o candidateOptions) *candidate {
	t.Helper()
	if o.kubeconfig == "" {
		o.kubeconfig = controlPlane.AdminKubeconfig()
	}
	ho := harness.CandidateOptions{
		Binary:      binary,
		Name:        name,
		Lease:       o.lease,
		Namespace:   o.namespace,
		Kubeconfig:  o.kubeconfig,
		Timings:     e2eTimings,
		Args:        append([]string{"-v=2"}, o.extraArgs...),
		Bare:        o.bareArgs,
		Env:         o.env,
		LogPath:     filepath.Join(t.TempDir(), name+".log"),
		ServingPath: o.startedPath,
	}
	if o.bareArgs {
		ho.Args = o.extraArgs
	}
	if o.binary != "" {
		ho.Binary = o.binary
	}
	if len(o.ports) == 2 {
		ho.APIPort, ho.ProbePort = o.ports[0], o.ports[1]
	}
	h, err := harness.StartCandidate(context.Background(), ho)
	if err != nil {
		t.Logf("---- last lines of %s's log ----\n%s", name, harness.TailFile(ho.LogPath, 60))
		t.Fatal(err)
	}
	c := &candidate{h: h, t: t, name: name, apiURL: h.APIURL(), probeURL: h.ProbeURL(), done: h.Done()}
	t.Cleanup(func() {
		h.Kill()
		if strings.Contains(h.Log(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race", name)
		}
		if t.Failed() {
			c.dumpLog()
		}
	})
	return c
}

// process names this candidate's process: its name and pid.
func (c *candidate) process() string { return c.h.String() }

func (c *candidate) running() bool { return c.h.Running() }

// api is a client of its application API.
func (c *candidate) api() *api.Client { return c.h.API() }

// state asks GET /leader.
func (c *candidate) state() (api.Leader, error) {
	return c.h.API().Leader(context.Background())
}

// do sends a request to the application API and returns status and body.
func (c *candidate) do(method, path string, header map[string]string) (int, http.Header, []byte, error) {
	return c.h.Do(context.Background(), method, path, header)
}

// probe asks the probe server and returns status and body.
func (c *candidate) probe(path string) (int, string, error) {
	return c.h.Probe(context.Background(), path)
}

func (c *candidate) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.h.Signal(sig); err != nil {
		c.t.Fatal(err)
	}
}

// waitExit waits for the process to end and returns its exit code.
func (c *candidate) waitExit(timeout time.Duration) (int, error) {
	return c.h.WaitExit(context.Background(), timeout)
}

func (c *candidate) log() string { return c.h.Log() }

func (c *candidate) dumpLog() {
	c.t.Logf("---- last lines of %s's log ----\n%s", c.name, c.h.LogTail(60))
}

// leaseName turns a test name into a unique, valid Lease name.
func leaseName(t testing.TB) string {
	var b bytes.Buffer
	for _, r := range strings.ToLower(t.Name()) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return strings.Trim(b.String(), "-")
}

// group is a set of candidates racing for one Lease, watched by a monitor.
type group struct {
	t          testing.TB
	lease      string
	mu         sync.Mutex
	candidates []*candidate
	monitor    *monitor
}

func newGroup(t testing.TB, n int, o candidateOptions) *group {
	t.Helper()
	if o.lease == "" {
		o.lease = leaseName(t)
	}
	g := &group{t: t, lease: o.lease}
	g.monitor = startMonitor(t, g.members)
	for i := range n {
		g.add(startCandidate(t, fmt.Sprintf("%s-%d", o.lease, i), o))
	}
	return g
}

func (g *group) add(c *candidate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.candidates = append(g.candidates, c)
}

func (g *group) members() []*candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*candidate(nil), g.candidates...)
}

// waitLeader waits until exactly one live candidate (other than those in
// exclude) reports isLeader and returns it.
func (g *group) waitLeader(timeout time.Duration, exclude ...*candidate) *candidate {
	g.t.Helper()
	var leader *candidate
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		leader = nil
		count := 0
		for _, c := range g.members() {
			if !c.running() || contains(exclude, c) {
				continue
			}
			s, err := c.state()
			if err == nil && s.IsLeader {
				leader = c
				count++
			}
		}
		return count == 1, nil
	})
	if err != nil {
		g.t.Fatalf("no single leader within %v", timeout)
	}
	return leader
}

func contains(list []*candidate, c *candidate) bool {
	for _, x := range list {
		if x == c {
			return true
		}
	}
	return false
}

// waitFollowing waits until c reports leader as the holder.
func waitFollowing(t testing.TB, c, leader *candidate) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		s, err := c.state()
		return err == nil && s.Holder == leader.name && !s.IsLeader, nil
	})
	if err != nil {
		s, _ := c.state()
		t.Fatalf("%s does not follow %s: %+v", c.name, leader.name, s)
	}
}

// holdsFor calls check every interval for d (first at once) and returns
// its first error; nil if check held throughout.
func holdsFor(d, interval time.Duration, check func() error) error {
	err := wait.PollUntilContextTimeout(context.Background(), interval, d, true, func(context.Context) (bool, error) {
		return false, check()
	})
	if wait.Interrupted(err) {
		return nil // d ran out with check holding
	}
	return err
}
