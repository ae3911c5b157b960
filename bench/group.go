package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/invariant"
)

// observation is one answer to GET /leader.
type observation struct {
	who      string
	sent     time.Time
	received time.Time
	state    api.Leader
}

// candidate is one running process of an implementation.
type candidate struct {
	name    string
	user    string // as the API server's audit log names it
	apiURL  string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	client  *http.Client
}

func (c *candidate) running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

func (c *candidate) pid() int { return c.cmd.Process.Pid }

// state asks GET /leader.
func (c *candidate) state(ctx context.Context) (api.Leader, error) {
	var s api.Leader
	return s, c.getJSON(ctx, "/leader", &s)
}

// getJSON asks the application API for path and decodes the answer.
func (c *candidate) getJSON(ctx context.Context, path string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.apiURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s%s: %s", c.apiURL, path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("decode GET %s%s: %w", c.apiURL, path, err)
	}
	return nil
}

func (c *candidate) signal(sig syscall.Signal) error {
	if err := c.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, c.name, err)
	}
	return nil
}

// waitExit waits for the process to end and returns its exit code.
func (c *candidate) waitExit(ctx context.Context, timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return -1, fmt.Errorf("%s still running %v after the signal", c.name, timeout)
	case <-ctx.Done():
		return -1, ctx.Err()
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

// group is the candidates of one implementation racing for one Lease, and
// the pollers that feed the monitor.
type group struct {
	opts *options
	cp   *cluster.ControlPlane
	im   *impl
	// lease is the Lease's name in namespace.
	lease string
	work  string
	mon   *invariant.Checker

	mu      sync.Mutex
	next    int
	members []*candidate
	latest  map[*candidate]observation
	// changed is closed (and replaced) on every observation, waking waiters.
	changed     chan struct{}
	pollCtx     context.Context
	stopPollers context.CancelFunc
	pollers     sync.WaitGroup
}

func newGroup(opts *options, cp *cluster.ControlPlane, im *impl, lease, work string) *group {
	return &group{
		opts:    opts,
		cp:      cp,
		im:      im,
		lease:   lease,
		work:    work,
		mon:     invariant.New(im.leaderElector),
		latest:  map[*candidate]observation{},
		changed: make(chan struct{}),
	}
}

// start starts a new candidate, with a new identity and its own service
// account, and waits until it answers GET /leader.
func (g *group) start(ctx context.Context) (*candidate, error) {
	g.mu.Lock()
	name := fmt.Sprintf("%s-%d", g.im.prefix, g.next)
	g.next++
	g.mu.Unlock()

	kubeconfig, err := g.cp.ServiceAccountKubeconfig(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	c := &candidate{
		name:    name,
		user:    "system:serviceaccount:" + namespace + ":" + name,
		apiURL:  fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		logPath: filepath.Join(g.work, name+".log"),
		done:    make(chan struct{}),
		client: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: 30 * time.Second},
		},
	}
	args := []string{
		"--lease-name=" + g.lease,
		"--lease-namespace=" + namespace,
		"--identity=" + name,
		"--kubeconfig=" + kubeconfig,
		"--lease-duration=" + g.opts.LeaseDuration.String(),
		"--renew-deadline=" + g.opts.RenewDeadline.String(),
		"--retry-period=" + g.opts.RetryPeriod.String(),
		fmt.Sprintf("--http-address=127.0.0.1:%d", ports[0]),
	}
	if g.im.leaderElector {
		args = append(args, fmt.Sprintf("--probe-address=127.0.0.1:%d", ports[1]), "-v=2")
	}
	if g.im.partitions > 0 {
		args = append(args, fmt.Sprintf("--partitions=%d", g.im.partitions))
	}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c.cmd = exec.Command(g.im.binary, args...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.Env = benchEnv()
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		logFile.Close()
		close(c.done)
		g.broadcast()
	}()
	g.mu.Lock()
	g.members = append(g.members, c)
	if g.pollCtx != nil {
		g.pollers.Add(1)
		go g.poll(g.pollCtx, c)
	}
	g.mu.Unlock()

	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if !c.running() {
			return false, fmt.Errorf("%s exited: %v (log: %s)", name, c.exitErr, c.logPath)
		}
		if g.im.partitions > 0 {
			_, err := c.partitions(ctx)
			return err == nil, nil
		}
		_, err := c.state(ctx)
		return err == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s did not start serving: %w", name, err)
	}
	return c, nil
}

// benchEnv is the environment of every candidate: this one without
// leader-elector's LEADER_ELECTOR_* settings, which would change the flags.
func benchEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if len(kv) >= len("LEADER_ELECTOR_") && kv[:len("LEADER_ELECTOR_")] == "LEADER_ELECTOR_" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// live returns the running candidates.
func (g *group) live() []*candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*candidate
	for _, c := range g.members {
		if c.running() {
			out = append(out, c)
		}
	}
	return out
}

// startPolling asks every candidate, present and future, for its state every
// PollInterval and feeds the answers to the monitor.
func (g *group) startPolling() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pollCtx, g.stopPollers = context.WithCancel(context.Background())
	for _, c := range g.members {
		if c.running() {
			g.pollers.Add(1)
			go g.poll(g.pollCtx, c)
		}
	}
}

// stopPolling stops every poller and waits for them.
func (g *group) stopPolling() {
	g.mu.Lock()
	stop := g.stopPollers
	g.pollCtx, g.stopPollers = nil, nil
	g.mu.Unlock()
	if stop != nil {
		stop()
	}
	g.pollers.Wait()
}

func (g *group) poll(ctx context.Context, c *candidate) {
	defer g.pollers.Done()
	tick := time.NewTicker(g.opts.PollInterval)
	defer tick.Stop()
	for {
		sent := time.Now()
		s, err := c.state(ctx)
		if err == nil {
			o := observation{who: c.name, sent: sent, received: time.Now(), state: s}
			g.mon.Record(invariant.LeaderAnswer(o.who, o.sent, o.state))
			g.mu.Lock()
			g.latest[c] = o
			g.mu.Unlock()
			g.broadcast()
		}
		select {
		case <-ctx.Done():
			return
		case <-c.done:
			return
		case <-tick.C:
		}
	}
}

func (g *group) broadcast() {
	g.mu.Lock()
	defer g.mu.Unlock()
	close(g.changed)
	g.changed = make(chan struct{})
}

// waitUntil waits, woken by every observation and exit, until cond (called
// with g.mu held) is true.
func (g *group) waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		ok, changed := cond(), g.changed
		g.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return fmt.Errorf("%s: not within %v", what, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// waitLeaderAfter waits until a running candidate other than exclude answers
// isLeader to a request sent after `after`, and returns it with that answer.
// It needs the pollers running.
func (g *group) waitLeaderAfter(ctx context.Context, exclude *candidate, after time.Time, timeout time.Duration) (*candidate, observation, error) {
	var (
		leader *candidate
		answer observation
	)
	err := g.waitUntil(ctx, timeout, "a new leader", func() bool {
		for _, c := range g.members {
			o, ok := g.latest[c]
			if c != exclude && c.running() && ok && o.state.IsLeader && o.sent.After(after) {
				leader, answer = c, o
				return true
			}
		}
		return false
	})
	return leader, answer, err
}

// waitLeader waits for a leader other than exclude.
func (g *group) waitLeader(ctx context.Context, exclude *candidate, timeout time.Duration) (*candidate, error) {
	c, _, err := g.waitLeaderAfter(ctx, exclude, time.Time{}, timeout)
	return c, err
}

// waitFollowing waits until every other running candidate names leader as
// the holder, so that a handover starts from a settled group.
func (g *group) waitFollowing(ctx context.Context, leader *candidate) error {
	settled := time.Now()
	return g.waitUntil(ctx, 10*time.Second+g.opts.RetryPeriod*2, "every candidate following "+leader.name, func() bool {
		for _, c := range g.members {
			if !c.running() || c == leader {
				continue
			}
			o, ok := g.latest[c]
			if !ok || !o.sent.After(settled) || o.state.Holder != leader.name || o.state.IsLeader {
				return false
			}
		}
		return true
	})
}

// stopAll stops every candidate still running (SIGKILL) and waits for them.
func (g *group) stopAll() {
	g.stopPolling()
	for _, c := range g.live() {
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pick a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
