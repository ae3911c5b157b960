//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Timings used by the e2e tests: short, so that failovers take seconds, and
// with the same ratios as the defaults (lease > renew > 1.2 × retry).
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 2 * time.Second
	retryPeriod   = 500 * time.Millisecond
)

// leaderState is the JSON of GET /leader.
type leaderState struct {
	Lease struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"lease"`
	Identity             string     `json:"identity"`
	Holder               string     `json:"holder"`
	IsLeader             bool       `json:"isLeader"`
	FencingToken         int64      `json:"fencingToken"`
	LeaseDurationSeconds int32      `json:"leaseDurationSeconds"`
	RenewTime            *time.Time `json:"renewTime"`
	LeaderSince          *time.Time `json:"leaderSince"`
	ValidUntil           *time.Time `json:"validUntil"`
	Revision             uint64     `json:"revision"`
}

// candidate is one leader-elector process.
type candidate struct {
	t        testing.TB
	name     string
	apiURL   string
	probeURL string
	logPath  string
	cmd      *exec.Cmd
	done     chan struct{}
	exitErr  error
	client   *http.Client
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
	if o.namespace == "" {
		o.namespace = "default"
	}
	ports := o.ports
	if len(ports) != 2 {
		ports = freePorts(t, 2)
	}
	c := &candidate{
		t:        t,
		name:     name,
		apiURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		probeURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		logPath:  filepath.Join(t.TempDir(), name+".log"),
		done:     make(chan struct{}),
		client:   &http.Client{Timeout: 5 * time.Second},
	}
	args := append([]string{
		"--lease-name=" + o.lease,
		"--lease-namespace=" + o.namespace,
		"--identity=" + name,
		"--kubeconfig=" + o.kubeconfig,
		"--lease-duration=" + leaseDuration.String(),
		"--renew-deadline=" + renewDeadline.String(),
		"--retry-period=" + retryPeriod.String(),
		fmt.Sprintf("--http-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--probe-address=127.0.0.1:%d", ports[1]),
		"-v=2",
	}, o.extraArgs...)
	if o.bareArgs {
		args = o.extraArgs
	}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := binary
	if o.binary != "" {
		bin = o.binary
	}
	c.cmd = exec.Command(bin, args...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// The race detector sleeps a second at exit by default; exits are
	// measured here. The test's own LEADER_ELECTOR_* variables (the tool
	// cache's) are no settings of the sidecar, which refuses unknown ones.
	base := cleanEnv()
	if o.bareArgs {
		base = nil // the test gives the whole environment
	}
	c.cmd.Env = append(append(base, "GORACE=atexit_sleep_ms=20"), o.env...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	t.Cleanup(func() {
		if c.running() {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Kill()
			<-c.done
		}
		if strings.Contains(c.log(), "WARNING: DATA RACE") {
			t.Errorf("%s: the race detector reported a data race", name)
		}
		if t.Failed() {
			c.dumpLog()
		}
	})
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if !c.running() {
			return false, fmt.Errorf("%s exited: %v", name, c.exitErr)
		}
		if o.startedPath != "" {
			status, _, _, err := c.do(http.MethodGet, o.startedPath, nil)
			return err == nil && status == http.StatusOK, nil
		}
		_, err := c.state()
		return err == nil, nil
	}); err != nil {
		c.dumpLog()
		t.Fatalf("%s did not start serving: %v", name, err)
	}
	return c
}

// process names this candidate's process: its name and pid.
func (c *candidate) process() string {
	return fmt.Sprintf("%s[%d]", c.name, c.cmd.Process.Pid)
}

func (c *candidate) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// state asks GET /leader.
func (c *candidate) state() (leaderState, error) {
	var s leaderState
	resp, err := c.client.Get(c.apiURL + "/leader")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /leader: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// do sends a request to the application API and returns status and body.
func (c *candidate) do(method, path string, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(method, c.apiURL+path, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

// probe asks the probe server and returns status and body.
func (c *candidate) probe(path string) (int, string, error) {
	resp, err := c.client.Get(c.probeURL + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (c *candidate) signal(sig syscall.Signal) {
	c.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.t.Fatalf("signal %v to %s: %v", sig, c.name, err)
	}
}

// waitExit waits for the process to end and returns its exit code.
func (c *candidate) waitExit(timeout time.Duration) (int, error) {
	select {
	case <-c.done:
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s still running after %v", c.name, timeout)
	}
	var exit *exec.ExitError
	if errors.As(c.exitErr, &exit) {
		return exit.ExitCode(), nil
	}
	if c.exitErr != nil {
		return -1, c.exitErr
	}
	return 0, nil
}

func (c *candidate) log() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}

func (c *candidate) dumpLog() {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	c.t.Logf("---- last lines of %s's log ----\n%s", c.name, strings.Join(lines, "\n"))
}

// freePorts returns n ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var listeners []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range listeners {
		l.Close()
	}
	return ports
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
