// Package cluster runs a real Kubernetes control plane — etcd and
// kube-apiserver, no kubelet, scheduler or controller-manager — on free
// loopback ports, for end-to-end tests and local demos.
//
// The apiserver serves TLS with a certificate from a throw-away CA (clients
// verify it), authenticates an admin through a static token in
// system:masters, authorises everyone else with RBAC, and issues
// service-account tokens through the TokenRequest API. It can be frozen,
// killed and restarted on the same port while etcd keeps the data, which is
// what leader-election fault tests need.
//
// Typical use in a test:
//
//	bin, err := cluster.EnsureBinaries(ctx, os.Stderr)
//	cp, err := cluster.Start(ctx, cluster.Options{BinDir: bin, WorkDir: t.TempDir()})
//	t.Cleanup(cp.Stop)
package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/leader-elector/leader-elector/test/harness"
)

// ReadyTimeout bounds how long Start and StartAPIServer wait for a component
// to become ready before failing with the tail of its log.
const ReadyTimeout = 60 * time.Second

// Options configures Start.
type Options struct {
	// BinDir holds the etcd and kube-apiserver binaries (see EnsureBinaries).
	BinDir string
	// WorkDir receives data dirs, certificates, kubeconfigs and component
	// logs. The caller creates and removes it (e.g. t.TempDir()).
	WorkDir string
	// Log receives short progress lines; may be nil. Component output goes
	// to log files in WorkDir, never here.
	Log io.Writer
	// NodeAddress, when set, prepares the control plane for a real node in
	// a network namespace of the caller's (see test/node): the apiserver
	// listens on all addresses of that namespace, advertises NodeAddress as
	// the endpoint of the "kubernetes" Service (so pods reach it through
	// the Service's ClusterIP, as in a real cluster), and its certificate is
	// valid for NodeAddress, the Service's ClusterIP and its DNS names.
	// Empty: loopback only.
	NodeAddress string
	// Audit makes the apiserver write an audit log of every request
	// (metadata level, one event per completed request) to AuditLogPath,
	// readable with AuditEvents. Off by default: it costs a write per request.
	Audit bool
}

// ControlPlane is a running etcd and kube-apiserver. Its methods are safe for
// concurrent use.
type ControlPlane struct {
	opts            Options
	pki             *pki
	etcdURL         string
	etcdPeerURL     string
	apiPort         int
	admin           *rest.Config
	adminClient     kubernetes.Interface
	pollClient      rest.Interface // admin, not rate limited, for readiness polls
	adminKubeconfig string
	auditPolicy     string

	mu        sync.Mutex
	etcd      *Process
	apiserver *Process // nil or exited while killed
	stopped   bool
}

// ServiceCIDR is the range the apiserver takes Service ClusterIPs from; the
// "kubernetes" Service gets its first address, KubernetesServiceIP.
const (
	ServiceCIDR         = "10.0.0.0/24"
	KubernetesServiceIP = "10.0.0.1"
)

// nodeSANs lists the extra names the serving certificate needs when pods
// reach the apiserver through the "kubernetes" Service.
func nodeSANs(nodeAddress string) ([]net.IP, []string, error) {
	if nodeAddress == "" {
		return nil, nil, nil
	}
	ip := net.ParseIP(nodeAddress)
	if ip == nil {
		return nil, nil, fmt.Errorf("NodeAddress %q is not an IP address", nodeAddress)
	}
	names := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	return []net.IP{ip, net.ParseIP(KubernetesServiceIP)}, names, nil
}

// portAttempts bounds retries when a port picked as free was taken by
// someone else before the component bound it.
const portAttempts = 3

// Start starts etcd and kube-apiserver and returns once the apiserver's
// /readyz answers 200 and the "default" namespace exists. On error nothing is
// left running. ctx bounds only the start-up: the components keep running
// until Stop.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	if opts.BinDir == "" || opts.WorkDir == "" {
		return nil, errors.New("cluster: Options.BinDir and Options.WorkDir are required")
	}
	if err := checkBinaries(opts.BinDir, binaries); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	workDir, err := filepath.Abs(opts.WorkDir)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	opts.WorkDir = workDir
	for _, d := range []string{"etcd", "logs", "kubeconfigs"} {
		if err := os.MkdirAll(filepath.Join(workDir, d), 0o700); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}

	c := &ControlPlane{opts: opts}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	extraIPs, extraNames, err := nodeSANs(opts.NodeAddress)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if c.pki, err = newPKI(filepath.Join(workDir, "pki"), extraIPs, extraNames); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if opts.Audit {
		if err := c.writeAuditPolicy(); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}

	began := time.Now()
	if err := c.startEtcd(ctx); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.logf("etcd ready at %s after %v", c.etcdURL, since(began))

	if err := c.startFirstAPIServer(ctx); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	// /readyz does not cover the namespaces the bootstrap controller creates
	// right after start; tests expect "default" to be usable at once.
	if err := c.waitFor(ctx, c.apiserver, "default namespace", func(ctx context.Context) error {
		_, err := c.pollClient.Get().AbsPath("/api/v1/namespaces/default").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	c.logf("kube-apiserver ready at %s after %v (total)", c.Host(), since(began))

	if c.adminKubeconfig, err = c.writeKubeconfig("admin", c.pki.adminToken, ""); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

// startEtcd starts etcd on fresh ports and waits for /health, retrying on new
// ports if one was taken in the meantime.
func (c *ControlPlane) startEtcd(ctx context.Context) error {
	var err error
	for range portAttempts {
		ports, perr := harness.FreePorts(2)
		if perr != nil {
			return perr
		}
		client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
		peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
		p, serr := StartProcess("etcd", filepath.Join(c.opts.BinDir, "etcd"), c.etcdArgs(client, peer), c.EtcdLogPath())
		if serr != nil {
			return serr
		}
		c.mu.Lock()
		c.etcd, c.etcdURL, c.etcdPeerURL = p, client, peer
		c.mu.Unlock()
		err = c.waitFor(ctx, p, "etcd", func(ctx context.Context) error { return etcdHealthy(ctx, client) })
		if err == nil || !portTaken(p) {
			return err
		}
		c.logf("etcd lost a port race, retrying on other ports")
	}
	return err
}

func (c *ControlPlane) etcdArgs(client, peer string) []string {
	return []string{
		"--name=leader-elector-test",
		"--data-dir=" + filepath.Join(c.opts.WorkDir, "etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=leader-elector-test=" + peer,
		// The data is thrown away with WorkDir; fsync only costs time (a
		// killed etcd loses nothing: the page cache outlives the process).
		"--unsafe-no-fsync",
		"--log-level=warn",
	}
}

// RestartEtcd SIGKILLs etcd and starts it again on the same ports with the
// same data, as a crashed member is restarted, and waits until it is
// healthy: meanwhile the apiserver's requests fail, and its watches start
// again from etcd after.
func (c *ControlPlane) RestartEtcd(ctx context.Context) error {
	c.mu.Lock()
	old, client, peer := c.etcd, c.etcdURL, c.etcdPeerURL
	stopped := c.stopped
	c.mu.Unlock()
	if stopped || old == nil {
		return errors.New("etcd is not running")
	}
	old.Kill()
	p, err := StartProcess("etcd", filepath.Join(c.opts.BinDir, "etcd"), c.etcdArgs(client, peer), c.EtcdLogPath())
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd = p
	c.mu.Unlock()
	return c.waitFor(ctx, p, "etcd", func(ctx context.Context) error { return etcdHealthy(ctx, client) })
}

// etcdHealthy asks etcd's /health, which reports false until it has a leader.
func etcdHealthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"health":"true"`) {
		return fmt.Errorf("/health: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// startFirstAPIServer picks the apiserver's port, which every later restart
// reuses, retrying on a new port if it was taken before the apiserver bound it.
func (c *ControlPlane) startFirstAPIServer(ctx context.Context) error {
	var err error
	for range portAttempts {
		ports, perr := harness.FreePorts(1)
		if perr != nil {
			return perr
		}
		c.setAPIPort(ports[0])
		err = c.StartAPIServer(ctx)
		if err == nil {
			return nil
		}
		c.mu.Lock()
		p := c.apiserver
		c.mu.Unlock()
		if p == nil || !portTaken(p) {
			return err
		}
		c.logf("kube-apiserver lost a port race, retrying on another port")
	}
	return err
}

// setAPIPort fixes the apiserver address and the admin clients built on it.
func (c *ControlPlane) setAPIPort(port int) {
	c.apiPort = port
	c.admin = &rest.Config{
		Host:            c.Host(),
		BearerToken:     c.pki.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.pki.caPEM},
	}
	// The tests' own client observes and injects faults; client-side
	// throttling would only delay what it measures, and its limiter fails a
	// call near a poll's deadline with an error no wait helper recognises.
	admin := rest.CopyConfig(c.admin)
	admin.QPS = -1
	c.adminClient = kubernetes.NewForConfigOrDie(admin)
	poll := rest.CopyConfig(c.admin)
	poll.QPS = -1 // a negative QPS disables client-side throttling
	poll.UserAgent = "leader-elector-test-cluster"
	c.pollClient = kubernetes.NewForConfigOrDie(poll).Discovery().RESTClient()
}

// StartAPIServer starts kube-apiserver on the control plane's port with the
// same certificates and keys (so existing clients and tokens keep working)
// and waits until /readyz answers 200. It fails if the apiserver is running.
func (c *ControlPlane) StartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return errors.New("control plane is stopped")
	}
	if c.apiserver != nil && !c.apiserver.Exited() {
		c.mu.Unlock()
		return errors.New("kube-apiserver is already running")
	}
	began := time.Now()
	p, err := StartProcess("kube-apiserver", filepath.Join(c.opts.BinDir, "kube-apiserver"), c.apiServerArgs(), c.APIServerLogPath())
	if err != nil {
		c.mu.Unlock()
		return err
	}
	c.apiserver = p
	// Unlock before waiting so Stop or KillAPIServer can interrupt the wait.
	c.mu.Unlock()

	err = c.waitFor(ctx, p, "kube-apiserver", func(ctx context.Context) error {
		_, err := c.pollClient.Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
	if err != nil {
		return err
	}
	c.logf("kube-apiserver (pid %d) ready at %s after %v", p.cmd.Process.Pid, c.Host(), since(began))
	return nil
}

func (c *ControlPlane) apiServerArgs() []string {
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--secure-port=" + strconv.Itoa(c.apiPort),
		"--tls-cert-file=" + c.pki.certFile,
		"--tls-private-key-file=" + c.pki.keyFile,
		// Never write self-signed certificates anywhere but WorkDir.
		"--cert-dir=" + filepath.Join(c.opts.WorkDir, "pki"),
		"--token-auth-file=" + c.pki.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.pki.saPubFile,
		"--service-account-signing-key-file=" + c.pki.saKeyFile,
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--profiling=false",
	}
	if c.opts.NodeAddress == "" {
		args = append(args,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			// The default reconciler publishes the advertise address as the
			// "kubernetes" Service endpoint and refuses a loopback one.
			"--endpoint-reconciler-type=none",
		)
	} else {
		args = append(args,
			"--bind-address=0.0.0.0",
			"--advertise-address="+c.opts.NodeAddress,
			// Logs and port-forwards reach the kubelet at the node's address.
			"--kubelet-preferred-address-types=InternalIP",
		)
	}
	if c.opts.Audit {
		args = append(args,
			"--audit-policy-file="+c.auditPolicy,
			"--audit-log-path="+c.AuditLogPath(),
			"--audit-log-format=json",
			// Blocking mode writes each event before the request finishes,
			// so a test sees its own requests without waiting for a batch.
			"--audit-log-mode=blocking",
		)
	}
	return args
}

func (c *ControlPlane) waitFor(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	return WaitFor(ctx, p, what, check)
}

// WaitFor polls check until it succeeds, p exits, ReadyTimeout passes or ctx
// ends. Failures name the last check error and show the tail of p's log.
func WaitFor(ctx context.Context, p *Process, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	began := time.Now()
	var last error
	for {
		if p.Exited() {
			return fmt.Errorf("waiting for %s: %w", what, p.ExitError())
		}
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		last = check(attempt)
		cancelAttempt()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %v (%w); last check: %v; last lines of %s:\n%s",
				what, since(began), ctx.Err(), last, p.logPath, p.LogTail())
		case <-p.done:
			// Report the exit on the next iteration.
		case <-tick.C:
		}
	}
}

// Stop kills the apiserver and etcd and waits until both have exited. It is
// idempotent and safe on a partially started control plane.
func (c *ControlPlane) Stop() {
	c.mu.Lock()
	c.stopped = true
	apiserver, etcd := c.apiserver, c.etcd
	c.mu.Unlock()
	// The apiserver first, so it does not log a storm of etcd errors.
	for _, p := range []*Process{apiserver, etcd} {
		if p != nil {
			p.Kill()
		}
	}
}

// Host is the apiserver URL, https://127.0.0.1:<port>; it survives restarts.
func (c *ControlPlane) Host() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.apiPort)
}

// AdminConfig returns a fresh copy of the admin client configuration (static
// token in system:masters, CA verified), free for the caller to modify.
func (c *ControlPlane) AdminConfig() *rest.Config { return rest.CopyConfig(c.admin) }

// AdminClient returns a clientset authenticated as the admin.
func (c *ControlPlane) AdminClient() kubernetes.Interface { return c.adminClient }

// AdminKubeconfig returns the path of a kubeconfig file for the admin.
func (c *ControlPlane) AdminKubeconfig() string { return c.adminKubeconfig }

// CAFile is the CA certificate that signed the apiserver's serving
// certificate (kube-controller-manager publishes it to pods as ca.crt).
func (c *ControlPlane) CAFile() string { return c.pki.caFile }

// ServiceAccountKeyFile is the private key service-account tokens are signed
// with.
func (c *ControlPlane) ServiceAccountKeyFile() string { return c.pki.saKeyFile }

// EtcdURL returns etcd's client URL (plain HTTP on loopback).
func (c *ControlPlane) EtcdURL() string { return c.etcdURL }

// APIServerLogPath is the apiserver's log file; restarts append to it.
func (c *ControlPlane) APIServerLogPath() string {
	return filepath.Join(c.opts.WorkDir, "logs", "kube-apiserver.log")
}

// EtcdLogPath is etcd's log file.
func (c *ControlPlane) EtcdLogPath() string {
	return filepath.Join(c.opts.WorkDir, "logs", "etcd.log")
}

// FreezeAPIServer stops the apiserver with SIGSTOP: its port stays open and
// connections hang, as with a wedged or partitioned server. etcd keeps running.
func (c *ControlPlane) FreezeAPIServer() error { return c.signalAPIServer(syscall.SIGSTOP) }

// ThawAPIServer resumes a frozen apiserver with SIGCONT.
func (c *ControlPlane) ThawAPIServer() error { return c.signalAPIServer(syscall.SIGCONT) }

func (c *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p == nil {
		return errors.New("kube-apiserver was never started")
	}
	return p.Signal(sig)
}

// KillAPIServer SIGKILLs the apiserver and waits until it has exited;
// connections are reset and the port refuses new ones. etcd keeps running.
// Killing an apiserver that is not running is a no-op.
func (c *ControlPlane) KillAPIServer() error {
	c.mu.Lock()
	p := c.apiserver
	c.mu.Unlock()
	if p != nil {
		p.Kill()
	}
	return nil
}

// MetricsText returns the body of the apiserver's /metrics (Prometheus text
// format), fetched as the admin.
//
// Note that apiserver_request_total has no user or user-agent label; to count
// requests per client, start with Options.Audit and use AuditEvents.
func (c *ControlPlane) MetricsText(ctx context.Context) (string, error) {
	b, err := c.pollClient.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("GET /metrics: %w", err)
	}
	return string(b), nil
}

func (c *ControlPlane) logf(format string, args ...any) {
	fmt.Fprintf(c.opts.Log, "cluster: "+format+"\n", args...)
}

// portTaken reports whether p exited because its port was taken.
func portTaken(p *Process) bool {
	return p.Exited() && strings.Contains(p.LogTail(), "address already in use")
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
