//go:build integration

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
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

// Timing bounds (docs/development.md, "Timing bounds in tests"). A bound a
// test asserts as a property is derived from the timings above plus
// e2eSlack, the suite's one allowance; a wait that only gives up, and then
// says what did not happen, waits giveUp.
const (
	// e2eSlack is the delay between an event and the test's observing it
	// that the timings do not predict: API server latency (a write and the
	// watch event that reports it to the other candidates) and process
	// scheduling on a loaded 2-core machine, every candidate built with the
	// race detector, and the test's own poll (at most 20 ms). Each bound
	// stays well short of what the code would cost if it were wrong: a
	// missed release costs a lease duration.
	e2eSlack = time.Second

	// takeoverBound: after the leader stopped renewing (SIGKILL, SIGSTOP),
	// a standby leads within this. The claim ends at most a lease duration
	// after the last renewal, which came before the fault; a standby tries
	// at the expiry it measured from its own observation of that renewal
	// (the election package schedules that attempt), not at client-go's
	// next retry.
	takeoverBound = leaseDuration + e2eSlack

	// giveUp is how long a wait that asserts no bound waits before it
	// fails and says what did not happen (a first election with the
	// processes' start, a process's exit, a route written): generous, so
	// that only a broken run reaches it.
	giveUp = 30 * time.Second
)

// maxRetryWait is the longest client-go's elector waits between two
// attempts at the suite's retry period (maxRetryWaitAt).
var maxRetryWait = maxRetryWaitAt(retryPeriod)

// maxRetryWaitAt is the longest client-go's elector waits between two
// attempts: wait.Jitter(retry, leaderelection.JitterFactor), up to 2.2
// retry periods.
func maxRetryWaitAt(retry time.Duration) time.Duration {
	return retry + time.Duration(leaderelection.JitterFactor*float64(retry))
}

// handoverBound: after the leader released the Lease (SIGTERM, POST
// /release), a standby leads within this. It sees the release on its watch
// and tries at once; at the latest client-go's next attempt comes
// maxRetryWait later.
var handoverBound = maxRetryWait + e2eSlack

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
	// leaseFile: elect through this file (--lease-store=file:), not the
	// control plane.
	leaseFile string
	extraArgs []string
	env       []string
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
	if o.kubeconfig == "" && o.leaseFile == "" {
		o.kubeconfig = controlPlane.AdminKubeconfig()
	}
	ho := harness.CandidateOptions{
		Binary:      binary,
		Name:        name,
		Lease:       o.lease,
		Namespace:   o.namespace,
		Kubeconfig:  o.kubeconfig,
		LeaseFile:   o.leaseFile,
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

// Process is its harness process: a candidate is a harness.Member.
func (c *candidate) Process() *harness.Candidate { return c.h }

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
// Its waits (WaitLeader) are the harness's, failing the test.
type group struct {
	harnesstest.Group[*candidate]
	lease   string
	monitor *monitor
}

// groupOf is a group of the candidates cs (none yet, often) on lease,
// without a monitor.
func groupOf(t testing.TB, lease string, cs ...*candidate) *group {
	g := &group{Group: harnesstest.Group[*candidate]{T: t}, lease: lease}
	for _, c := range cs {
		g.Add(c)
	}
	return g
}

func newGroup(t testing.TB, n int, o candidateOptions) *group {
	t.Helper()
	if o.lease == "" {
		o.lease = leaseName(t)
	}
	g := groupOf(t, o.lease)
	g.monitor = startMonitor(t, g.Members)
	for i := range n {
		g.Add(startCandidate(t, fmt.Sprintf("%s-%d", o.lease, i), o))
	}
	return g
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
