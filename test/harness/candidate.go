package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// Timings are the election timings a candidate runs with.
type Timings struct {
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Flags are the timings as command-line flags.
func (t Timings) Flags() []string {
	return []string{
		"--lease-duration=" + t.LeaseDuration.String(),
		"--renew-deadline=" + t.RenewDeadline.String(),
		"--retry-period=" + t.RetryPeriod.String(),
	}
}

// CandidateOptions say how to start one candidate: leader-elector, or the
// benchmark's baseline, which takes the same flags but has no probe server.
type CandidateOptions struct {
	// Binary is the program to run.
	Binary string
	// Name is the candidate's identity (--identity) and names it in errors.
	Name string
	// Lease and Namespace name the Lease; Namespace is "default" if empty.
	Lease, Namespace string
	Kubeconfig       string
	// LeaseFile, when set, is the local lease store the candidate elects
	// through (--lease-store=file:) instead of Kubeconfig's API server.
	LeaseFile string
	Timings   Timings
	// APIPort and ProbePort are where its servers listen on loopback;
	// free ports if zero.
	APIPort, ProbePort int
	// NoProbeServer leaves out --probe-address (the baseline has none).
	NoProbeServer bool
	// Args come after the flags above.
	Args []string
	// Bare: the command line is Args alone and the environment Env alone;
	// the caller configures everything, on the ports it gives.
	Bare bool
	// Env is added to CleanEnv().
	Env []string
	// LogPath receives the process's stdout and stderr.
	LogPath string
	// ServingPath answers 200 once the process serves: "/leader" if empty.
	ServingPath string
	// HTTPClient asks its servers; one with a 5 s timeout if nil.
	HTTPClient *http.Client
}

// startTimeout bounds how long a candidate may take to serve its API.
const startTimeout = 30 * time.Second

// Candidate is one running candidate process.
type Candidate struct {
	name     string
	apiURL   string
	probeURL string
	logPath  string
	cmd      *exec.Cmd
	client   *http.Client
	api      *api.Client
	done     chan struct{}
	// exitErr is set before done is closed.
	exitErr error
}

// StartCandidate starts a candidate and waits until its API answers o.ServingPath.
// If it does not within 30 s, the process is killed and an error returned.
// The process dies with the caller (Pdeathsig).
func StartCandidate(ctx context.Context, o CandidateOptions) (*Candidate, error) {
	c, err := launch(o)
	if err != nil {
		return nil, err
	}
	path := o.ServingPath
	if path == "" {
		path = "/leader"
	}
	if err := c.waitServing(ctx, path); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

func launch(o CandidateOptions) (*Candidate, error) {
	if o.Binary == "" || o.LogPath == "" {
		return nil, fmt.Errorf("start %s: a binary and a log path are needed", o.Name)
	}
	if err := pickPorts(&o); err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	client := o.HTTPClient
	if client == nil {
		client = &http.Client{Timeout: 5 * time.Second}
	}
	c := &Candidate{
		name:    o.Name,
		apiURL:  fmt.Sprintf("http://127.0.0.1:%d", o.APIPort),
		logPath: o.LogPath,
		client:  client,
		done:    make(chan struct{}),
	}
	if !o.NoProbeServer {
		c.probeURL = fmt.Sprintf("http://127.0.0.1:%d", o.ProbePort)
	}
	c.api = api.NewClient(c.apiURL, client)
	logFile, err := os.Create(o.LogPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	c.cmd = exec.Command(o.Binary, commandLine(o)...)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	base := CleanEnv()
	if o.Bare {
		base = nil
	}
	// The race detector sleeps a second at exit by default; exits are
	// measured.
	c.cmd.Env = append(append(base, "GORACE=atexit_sleep_ms=20"), o.Env...)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", o.Name, err)
	}
	go func() {
		c.exitErr = c.cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	return c, nil
}

func pickPorts(o *CandidateOptions) error {
	if o.APIPort != 0 && (o.ProbePort != 0 || o.NoProbeServer) {
		return nil
	}
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	if o.APIPort == 0 {
		o.APIPort = ports[0]
	}
	if o.ProbePort == 0 {
		o.ProbePort = ports[1]
	}
	return nil
}

func commandLine(o CandidateOptions) []string {
	if o.Bare {
		return o.Args
	}
	namespace := o.Namespace
	if namespace == "" {
		namespace = "default"
	}
	args := []string{
		"--lease-name=" + o.Lease,
		"--lease-namespace=" + namespace,
		"--identity=" + o.Name,
	}
	if o.LeaseFile != "" {
		args = append(args, "--lease-store=file:"+o.LeaseFile)
	} else {
		args = append(args, "--kubeconfig="+o.Kubeconfig)
	}
	args = append(args, o.Timings.Flags()...)
	args = append(args, fmt.Sprintf("--http-address=127.0.0.1:%d", o.APIPort))
	if !o.NoProbeServer {
		args = append(args, fmt.Sprintf("--probe-address=127.0.0.1:%d", o.ProbePort))
	}
	return append(args, o.Args...)
}

// waitServing polls path until it answers 200; it fails at once if the
// process exits.
func (c *Candidate) waitServing(ctx context.Context, path string) error {
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, startTimeout, true, func(ctx context.Context) (bool, error) {
		if !c.Running() {
			return false, fmt.Errorf("%s exited: %v", c.name, c.exitErr)
		}
		status, _, _, err := c.Do(ctx, http.MethodGet, path, nil)
		return err == nil && status == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s did not start serving (log: %s): %w", c.name, c.logPath, err)
	}
	return nil
}

// Name is the candidate's identity.
func (c *Candidate) Name() string { return c.name }

// Pid is the process's id.
func (c *Candidate) Pid() int { return c.cmd.Process.Pid }

// String names the process: its name and pid.
func (c *Candidate) String() string { return fmt.Sprintf("%s[%d]", c.name, c.Pid()) }

// API is a client of its application API.
func (c *Candidate) API() *api.Client { return c.api }

// APIURL is where its application API answers ("http://127.0.0.1:<port>").
func (c *Candidate) APIURL() string { return c.apiURL }

// ProbeURL is where its probe server answers; "" if it has none.
func (c *Candidate) ProbeURL() string { return c.probeURL }

// HTTPClient is the client it is asked with.
func (c *Candidate) HTTPClient() *http.Client { return c.client }

// Running tells whether the process has not exited yet.
func (c *Candidate) Running() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// Done is closed when the process has exited.
func (c *Candidate) Done() <-chan struct{} { return c.done }

// Signal sends sig to the process; for SIGSTOP it returns once the process
// is stopped.
func (c *Candidate) Signal(sig syscall.Signal) error {
	if err := Signal(c.cmd.Process, sig); err != nil {
		return fmt.Errorf("signal %v to %s: %w", sig, c.name, err)
	}
	return nil
}

// Kill kills the process, stopped (SIGSTOP) or not, and waits for it.
func (c *Candidate) Kill() {
	if c.Running() {
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
	}
	<-c.done
}

// WaitExit waits up to timeout for the process to end and returns its exit
// code.
func (c *Candidate) WaitExit(ctx context.Context, timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
		return -1, fmt.Errorf("%s still running after %v", c.name, timeout)
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

// Do sends a request to the application API and returns status, header
// and body: for what the api client does not ask (other media types,
// malformed requests).
func (c *Candidate) Do(ctx context.Context, method, path string, header map[string]string) (int, http.Header, []byte, error) {
	return c.request(ctx, method, c.apiURL+path, header)
}

// Probe asks the probe server for path and returns status and body.
func (c *Candidate) Probe(ctx context.Context, path string) (int, string, error) {
	if c.probeURL == "" {
		return 0, "", fmt.Errorf("%s has no probe server", c.name)
	}
	status, _, body, err := c.request(ctx, http.MethodGet, c.probeURL+path, nil)
	return status, string(body), err
}

func (c *Candidate) request(ctx context.Context, method, url string, header map[string]string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
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

// LogPath is the file of its stdout and stderr.
func (c *Candidate) LogPath() string { return c.logPath }

// Log is what it has logged so far.
func (c *Candidate) Log() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}

// LogTail is the last n lines of its log.
func (c *Candidate) LogTail(n int) string { return TailFile(c.logPath, n) }

// TailFile is the last n lines of the file at path; "" if it cannot be
// read. A candidate that failed to start leaves its log there.
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
