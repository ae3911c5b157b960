// Package node runs a real single-node Kubernetes cluster for the tests that
// need pods: etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// containerd (runc), kubelet and kube-proxy, all at the versions the project
// pins, all inside one network namespace.
//
// Network safety: the cluster's pod and Service addresses are private-range
// addresses; they must never exist outside a network namespace made for the
// test. The caller (test/node/run.sh) creates that namespace and starts the
// test binary in it with `nsenter --net`; Start refuses to run in the
// machine's own network namespace, then creates the bridge, the node address
// and the Service route inside it. Nothing is routed to the machine's
// interfaces: the namespace has none.
//
// Start leaves nothing behind when it fails; Stop deletes every pod, stops
// the components and unmounts what the kubelet mounted. run.sh checks the
// machine afterwards and removes whatever a crashed test left.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// The node's network, inside the test's network namespace only.
const (
	// Name is the node's name.
	Name = "leader-elector-test-node"
	// Address is the node's address: the bridge's, and the pods' gateway.
	Address = "10.222.0.1"
	// PodSubnet is where pods get their addresses (host-local IPAM).
	PodSubnet = "10.222.0.0/24"
	// bridge is the Linux bridge the pods' veths join.
	bridge = "le-br0"
)

// Image is an OCI archive to import into the node's containerd, and the
// names it must answer to (pods use imagePullPolicy IfNotPresent or Never:
// nothing can be pulled).
type Image struct {
	Archive string
	Names   []string
}

// Options configures Start.
type Options struct {
	// BinDir holds etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kubelet and kube-proxy (test/tools/build.sh with
	// KUBE_COMMANDS).
	BinDir string
	// WorkDir receives every component's state, configuration and logs.
	WorkDir string
	// Images are imported before the kubelet starts. PauseImage names the
	// sandbox image; it must be among them.
	Images     []Image
	PauseImage string
	// Log receives progress lines; may be nil.
	Log io.Writer
	// MaxRestartBackOff caps the kubelet's crash back-off
	// (crashLoopBackOff.maxContainerRestartPeriod, kubelet 1.35 and
	// later); 0 keeps the kubelet's 5 minutes, which a sidecar the soak
	// kills again and again would otherwise wait out.
	MaxRestartBackOff time.Duration
}

// Node is a running single-node cluster.
type Node struct {
	opts Options
	cp   *cluster.ControlPlane

	mu    sync.Mutex
	procs []*cluster.Process // in start order; stopped in reverse
}

// Start brings the node up and returns once it is Ready and kube-proxy
// routes the "kubernetes" Service. ctx bounds the start only.
func Start(ctx context.Context, opts Options) (_ *Node, err error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if err := checkIsolated(); err != nil {
		return nil, err
	}
	for _, bin := range []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("node: %s missing in %s: build it with KUBE_COMMANDS (make e2e-cluster does): %w", bin, opts.BinDir, err)
		}
	}
	for _, bin := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "conntrack", "ip", "/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("node: %s not found: install containerd, runc, containernetworking-plugins, iptables, conntrack (make node-deps does): %w", bin, err)
		}
	}
	began := time.Now()
	n := &Node{opts: opts}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if err := setupNetwork(); err != nil {
		return nil, err
	}
	n.cp, err = cluster.Start(ctx, cluster.Options{
		BinDir:      opts.BinDir,
		WorkDir:     filepath.Join(opts.WorkDir, "control-plane"),
		Log:         opts.Log,
		NodeAddress: Address,
		Audit:       true,
	})
	if err != nil {
		return nil, err
	}
	if err := n.startControllers(); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	for _, img := range opts.Images {
		if err := n.importImage(ctx, img); err != nil {
			return nil, err
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(ctx); err != nil {
		return nil, err
	}
	n.logf("node %s ready after %v", Name, time.Since(began).Round(time.Millisecond))
	return n, nil
}

// ControlPlane is the node's etcd and kube-apiserver.
func (n *Node) ControlPlane() *cluster.ControlPlane { return n.cp }

// Client is an admin clientset.
func (n *Node) Client() kubernetes.Interface { return n.cp.AdminClient() }

// checkIsolated refuses to run in the machine's own network namespace: the
// cluster's addresses must exist only in a namespace made for the test.
func checkIsolated() error {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		return fmt.Errorf("node: reading this process's network namespace: %w", err)
	}
	host := os.Getenv("LEADER_ELECTOR_NODE_HOST_NETNS")
	if host == "" {
		return errors.New("node: LEADER_ELECTOR_NODE_HOST_NETNS is not set: run the tests through test/node/run.sh (make e2e-cluster), which starts them in a network namespace of their own")
	}
	if self == host {
		return errors.New("node: refusing to start in the machine's network namespace: run the tests through test/node/run.sh (make e2e-cluster), which starts them in a network namespace of their own")
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return fmt.Errorf("node: ip link: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		name := strings.TrimSuffix(strings.SplitN(fields[1], "@", 2)[0], ":")
		if name != "lo" && name != bridge && !strings.HasPrefix(name, "veth") {
			return fmt.Errorf("node: the network namespace has an interface %q: it must be an empty namespace made for the test", name)
		}
	}
	return nil
}

// setupNetwork brings up loopback and the pods' bridge with the node address,
// and routes the Service range to the bridge, where kube-proxy's rules
// rewrite it to pod addresses. All of it dies with the namespace.
func setupNetwork() error {
	cmds := [][]string{
		{"link", "set", "lo", "up"},
		{"link", "add", bridge, "type", "bridge"},
		{"addr", "add", Address + "/24", "dev", bridge},
		{"link", "set", bridge, "up"},
		{"route", "add", cluster.ServiceCIDR, "dev", bridge},
	}
	for _, args := range cmds {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("node: ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func (n *Node) dir(parts ...string) string {
	return filepath.Join(append([]string{n.opts.WorkDir}, parts...)...)
}

// start starts a component with its log in WorkDir/logs.
func (n *Node) start(name string, args ...string) (*cluster.Process, error) {
	if err := os.MkdirAll(n.dir("logs"), 0o755); err != nil {
		return nil, err
	}
	bin := name
	if _, err := os.Stat(filepath.Join(n.opts.BinDir, name)); err == nil {
		bin = filepath.Join(n.opts.BinDir, name)
	}
	p, err := cluster.StartProcess(name, bin, args, n.LogPath(name))
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.procs = append(n.procs, p)
	n.mu.Unlock()
	return p, nil
}

// LogPath is a component's log file.
func (n *Node) LogPath(component string) string { return n.dir("logs", component+".log") }

func (n *Node) startControllers() error {
	kubeconfig := n.cp.AdminKubeconfig()
	if _, err := n.start("kube-controller-manager",
		"--kubeconfig="+kubeconfig,
		"--root-ca-file="+n.cp.CAFile(),
		"--service-account-private-key-file="+n.cp.ServiceAccountKeyFile(),
		"--leader-elect=false",
		"--secure-port=0",
		"--controllers=*",
	); err != nil {
		return err
	}
	_, err := n.start("kube-scheduler",
		"--kubeconfig="+kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
	)
	return err
}

// Stop deletes every pod (so the kubelet stops their containers and
// releases their addresses), stops the components in reverse order and
// unmounts what the kubelet mounted. Idempotent.
func (n *Node) Stop() {
	if n.cp != nil {
		n.deleteAllPods()
	}
	n.mu.Lock()
	procs := n.procs
	n.procs = nil
	n.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop(10 * time.Second)
	}
	n.removeContainers()
	if n.cp != nil {
		n.cp.Stop()
	}
	unmountUnder(n.dir())
}

// deleteAllPods deletes the pods of every namespace and waits (bounded)
// until containerd runs no task, so that the kubelet stopped the containers
// and the CNI plugin released the addresses.
func (n *Node) deleteAllPods() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := n.Client()
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range nss.Items {
		// Deleting the namespace stops the controllers from making new pods.
		if ns.Name != "default" && !strings.HasPrefix(ns.Name, "kube-") {
			_ = c.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		}
		_ = c.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{})
	}
	for ctx.Err() == nil {
		pods, err := c.CoreV1().Pods(corev1.NamespaceAll).List(ctx, metav1.ListOptions{})
		tasks, terr := n.ctr(ctx, "tasks", "list", "--quiet")
		if err == nil && terr == nil && len(pods.Items) == 0 && strings.TrimSpace(tasks) == "" {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	n.logf("pods or containers still running after 60s; removing them directly")
}

// removeContainers kills and removes whatever containerd still runs, when
// the kubelet could not (it is stopped by then).
func (n *Node) removeContainers() {
	if n.containerdSock() == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := n.ctr(ctx, "containers", "list", "--quiet")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(out) {
		_, _ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
		_, _ = n.ctr(ctx, "tasks", "delete", "--force", id)
		_, _ = n.ctr(ctx, "containers", "delete", id)
	}
}

// unmountUnder unmounts every mount point below dir, deepest first (the
// kubelet mounts secrets and projected tokens under its root dir).
func unmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	for i := len(points) - 1; i >= 0; i-- {
		_ = syscall.Unmount(points[i], syscall.MNT_DETACH)
	}
}

func (n *Node) logf(format string, args ...any) {
	fmt.Fprintf(n.opts.Log, "node: "+format+"\n", args...)
}
