package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// failCgroupV1Since is the first kubelet release that knows failCgroupV1
// (KubeletConfiguration, cgroup v1 in maintenance mode); from 1.35 it
// defaults to true and the kubelet refuses to start on cgroup v1.
var failCgroupV1Since = version.MustParseGeneric("1.31")

// maxRestartBackOffSince is the first kubelet release whose
// crashLoopBackOff.maxContainerRestartPeriod is on by default (the
// KubeletCrashLoopBackOffMax feature, beta).
var maxRestartBackOffSince = version.MustParseGeneric("1.35")

// kubeletVersion is the release of the kubelet at bin, as `kubelet
// --version` prints it ("Kubernetes v1.30.14"): the node suite runs the
// pinned kubelet and, through `make e2e-cluster-version`, older ones, and
// each is given only the configuration fields it knows.
func kubeletVersion(bin string) (*version.Version, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("node: %s --version: %w", bin, err)
	}
	return parseKubeletVersion(string(out))
}

func parseKubeletVersion(out string) (*version.Version, error) {
	s, ok := strings.CutPrefix(strings.TrimSpace(out), "Kubernetes ")
	if !ok {
		return nil, fmt.Errorf("node: kubelet --version printed %q, want \"Kubernetes vX.Y.Z\"", strings.TrimSpace(out))
	}
	v, err := version.ParseSemantic(s)
	if err != nil {
		return nil, fmt.Errorf("node: kubelet --version printed %q: %w", strings.TrimSpace(out), err)
	}
	return v, nil
}

// kubeletConfig is the kubelet's configuration for this machine (cgroup v1,
// no systemd, swap on, a small disk) and for a test: the apiserver fetches
// logs from it anonymously, inside the namespace only. kv is the kubelet's
// release: a field it does not know is left out rather than sent to a
// kubelet that would only warn about it and ignore it.
func (n *Node) kubeletConfig(kv *version.Version) (map[string]any, error) {
	config := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"failSwapOn":               false,
		"resolvConf":               "",
		"containerRuntimeEndpoint": "unix://" + n.containerdSock(),
		"podLogsDir":               n.dir("kubelet", "pod-logs"),
		"address":                  Address,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
		// The test machine's disk may be fuller than the kubelet likes.
		"evictionHard": map[string]string{
			"memory.available":  "1Mi",
			"nodefs.available":  "1Mi",
			"imagefs.available": "1Mi",
			"nodefs.inodesFree": "1",
		},
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// Status reaches the apiserver fast, so tests see readiness changes
		// within a probe period.
		"nodeStatusUpdateFrequency": "4s",
		"syncFrequency":             "10s",
	}
	// An older kubelet runs on cgroup v1 without being asked.
	if kv.AtLeast(failCgroupV1Since) {
		config["failCgroupV1"] = false
	}
	if d := n.opts.MaxRestartBackOff; d > 0 {
		if !kv.AtLeast(maxRestartBackOffSince) {
			return nil, fmt.Errorf("node: a crash back-off of %v needs a kubelet of %v or later, not %v", d, maxRestartBackOffSince, kv)
		}
		config["crashLoopBackOff"] = map[string]string{"maxContainerRestartPeriod": d.String()}
	}
	return config, nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	if err := os.MkdirAll(n.dir("kubelet", "pod-logs"), 0o755); err != nil {
		return err
	}
	bin := filepath.Join(n.opts.BinDir, "kubelet")
	kv, err := kubeletVersion(bin)
	if err != nil {
		return err
	}
	n.logf("kubelet v%s", kv)
	config, err := n.kubeletConfig(kv)
	if err != nil {
		return err
	}
	if err := writeJSON(n.dir("kubelet", "config.json"), config); err != nil {
		return err
	}
	p, err := n.start("kubelet",
		"--config="+n.dir("kubelet", "config.json"),
		"--kubeconfig="+n.cp.AdminKubeconfig(),
		"--root-dir="+n.dir("kubelet", "root"),
		"--hostname-override="+Name,
		"--node-ip="+Address,
		"--v=2",
	)
	if err != nil {
		return err
	}
	return cluster.WaitFor(ctx, p, "node "+Name+" Ready", func(ctx context.Context) error {
		node, err := n.Client().CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				return fmt.Errorf("condition Ready=%s: %s", c.Status, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// startKubeProxy runs kube-proxy in iptables mode, configured to change no
// sysctl (conntrack sizes 0, no localhost node ports), and waits until the
// "kubernetes" Service's ClusterIP answers.
func (n *Node) startKubeProxy(ctx context.Context) error {
	config := map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"clientConnection": map[string]any{"kubeconfig": n.cp.AdminKubeconfig()},
		"mode":             "iptables",
		"hostnameOverride": Name,
		"clusterCIDR":      PodSubnet,
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
		"iptables":           map[string]any{"localhostNodePorts": false, "syncPeriod": "30s", "minSyncPeriod": "0s"},
		"metricsBindAddress": "127.0.0.1:10249",
		"healthzBindAddress": "127.0.0.1:10256",
	}
	if err := os.MkdirAll(n.dir("kube-proxy"), 0o755); err != nil {
		return err
	}
	if err := writeJSON(n.dir("kube-proxy", "config.json"), config); err != nil {
		return err
	}
	p, err := n.start("kube-proxy", "--config="+n.dir("kube-proxy", "config.json"), "--v=2")
	if err != nil {
		return err
	}
	return cluster.WaitFor(ctx, p, "kube-proxy routing the kubernetes Service", func(ctx context.Context) error {
		conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(cluster.KubernetesServiceIP, "443"))
		if err != nil {
			return err
		}
		return conn.Close()
	})
}
