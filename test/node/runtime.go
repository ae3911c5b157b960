package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// containerdNamespace is where the CRI plugin keeps Kubernetes' images and
// containers.
const containerdNamespace = "k8s.io"

// containerdConfig is containerd 1.6's configuration for the node: its own
// root, state and socket, runc without systemd, CNI from Debian's plugins.
// restrict_oom_score_adj: root here cannot lower oom_score_adj, and without
// it every sandbox fails with "can't get final child's PID from pipe: EOF".
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`

func (n *Node) containerdSock() string {
	if n.cp == nil {
		return ""
	}
	return n.dir("containerd", "containerd.sock")
}

func (n *Node) startContainerd(ctx context.Context) error {
	for _, d := range []string{n.dir("containerd"), n.dir("cni", "net.d"), n.dir("cni", "ipam")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := writeJSON(n.dir("cni", "net.d", "10-bridge.conflist"), n.cniConfig()); err != nil {
		return err
	}
	config := fmt.Sprintf(containerdConfig, n.dir("containerd", "root"), n.dir("containerd", "state"),
		n.containerdSock(), n.containerdSock()+".ttrpc", n.opts.PauseImage, n.dir("cni", "net.d"))
	if err := os.WriteFile(n.dir("containerd", "config.toml"), []byte(config), 0o644); err != nil {
		return err
	}
	p, err := n.start("containerd", "--config", n.dir("containerd", "config.toml"))
	if err != nil {
		return err
	}
	return cluster.WaitFor(ctx, p, "containerd", func(ctx context.Context) error {
		_, err := n.ctr(ctx, "version")
		return err
	})
}

// cniConfig is a bridge network on the node's bridge with host-local
// addresses from PodSubnet. The default route through the node lets pods
// reach ClusterIPs (kube-proxy rewrites them on the node); the namespace has
// no other way out.
func (n *Node) cniConfig() map[string]any {
	return map[string]any{
		"cniVersion": "1.0.0",
		"name":       "leader-elector-test",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridge,
				"isGateway":   true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": n.dir("cni", "ipam"),
					"ranges":  [][]map[string]string{{{"subnet": PodSubnet, "gateway": Address}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
}

// importImage imports an OCI archive and tags it with the image's names.
func (n *Node) importImage(ctx context.Context, img Image) error {
	before, err := n.imageNames(ctx)
	if err != nil {
		return err
	}
	if _, err := n.ctr(ctx, "images", "import", "--all-platforms", img.Archive); err != nil {
		return err
	}
	after, err := n.imageNames(ctx)
	if err != nil {
		return err
	}
	var imported []string
	for _, name := range after {
		if !slices.Contains(before, name) && !strings.Contains(name, "sha256:") {
			imported = append(imported, name)
		}
	}
	if len(imported) != 1 {
		return fmt.Errorf("node: importing %s: expected one new image, got %q", img.Archive, imported)
	}
	for _, name := range img.Names {
		if name == imported[0] {
			continue
		}
		if _, err := n.ctr(ctx, "images", "tag", "--force", imported[0], name); err != nil {
			return err
		}
	}
	n.logf("imported %s as %s", imported[0], strings.Join(img.Names, ", "))
	return nil
}

func (n *Node) imageNames(ctx context.Context) ([]string, error) {
	out, err := n.ctr(ctx, "images", "list", "--quiet")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}

// ctr runs ctr against the node's containerd, in the CRI's namespace.
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.containerdSock(), "--namespace", containerdNamespace}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// ContainerPID returns the host pid of a running container's main process,
// from its CRI id ("containerd://<id>" in the pod's status, or the bare id).
func (n *Node) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := n.ctr(ctx, "tasks", "list")
	if err != nil {
		return 0, err
	}
	running := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		running++
		if f[0] == id {
			var pid int
			if _, err := fmt.Sscan(f[1], &pid); err != nil {
				return 0, fmt.Errorf("pid of container %s: %q: %w", id, f[1], err)
			}
			return pid, nil
		}
	}
	// One line: it ends up in the soak report's "not injected" list, where
	// the whole task list was noise.
	return 0, fmt.Errorf("container %.12s is not running (not among the node's %d running tasks)", id, running)
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
