package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// containerd is a containerd of the test's own — its own root, state and
// socket, the CRI plugin off — that runs containers with runc, as a node
// would. Nothing of it outlives the test.
type containerd struct {
	dir, sock, namespace string
	cmd                  *exec.Cmd
	done                 chan struct{}
}

func startContainerd(dir string) (*containerd, error) {
	for _, bin := range []string{"containerd", "ctr", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s not found: install containerd and runc (make image-deps does, with apt-get): %w", bin, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &containerd{dir: dir, sock: filepath.Join(dir, "c.sock"), namespace: "leader-elector-image-test", done: make(chan struct{})}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.sock, c.sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	go func() {
		_ = c.cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, _, err := c.ctr(context.Background(), "version"); err == nil {
			return c, nil
		} else if time.Now().After(deadline) {
			c.stop()
			log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			return nil, fmt.Errorf("containerd not ready after 20s: %v\n%s", err, log)
		}
		select {
		case <-c.done:
			log, _ := os.ReadFile(filepath.Join(dir, "containerd.log"))
			return nil, fmt.Errorf("containerd exited:\n%s", log)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ctr runs a ctr command against this containerd.
func (c *containerd) ctr(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	cmd := c.command(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

func (c *containerd) command(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ctr", append([]string{"--address", c.sock, "--namespace", c.namespace}, args...)...)
}

// stop removes what is left of the test's containers, then stops containerd.
func (c *containerd) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, _, err := c.ctr(ctx, "containers", "list", "--quiet"); err == nil {
		for _, id := range strings.Fields(out) {
			_, _, _ = c.ctr(ctx, "task", "kill", "--signal", "SIGKILL", id)
			_, _, _ = c.ctr(ctx, "task", "delete", "--force", id)
			_, _, _ = c.ctr(ctx, "containers", "delete", id)
		}
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
