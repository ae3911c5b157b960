// Package registry runs a real OCI registry for tests — the CNCF
// distribution registry, built from the Go module proxy by registry.sh —
// on a free loopback port, plain HTTP, storing in a directory of the
// test's. The release test pushes `make release` to it; the real-node test
// installs from it as users do.
package registry

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
)

// Registry is a running registry.
type Registry struct {
	// Host is 127.0.0.1:<port>, what image references and oci:// URLs name.
	Host    string
	cmd     *exec.Cmd
	logFile *os.File
	logPath string
}

// Start builds the registry if the tools cache lacks it (progress goes to
// log), starts it storing in dir, and waits until it answers GET /v2/.
func Start(ctx context.Context, dir string, log io.Writer) (*Registry, error) {
	root, err := harness.RepoRoot()
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	build := exec.CommandContext(ctx, "bash", filepath.Join(root, "test", "registry", "registry.sh"))
	build.Stdout, build.Stderr = &out, log
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("installing the registry (test/registry/registry.sh): %w", err)
	}
	bin := strings.TrimSpace(out.String())
	ports, err := harness.FreePorts(1)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", ports[0]), logPath: filepath.Join(dir, "registry.log")}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %q\nhttp:\n  addr: %q\n",
		filepath.Join(dir, "storage"), r.Host)
	configPath := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		return nil, err
	}
	if r.logFile, err = os.Create(r.logPath); err != nil {
		return nil, err
	}
	r.cmd = exec.Command(bin, "serve", configPath)
	// No tracing exporter: it would try to reach a collector.
	r.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	r.cmd.Stdout, r.cmd.Stderr = r.logFile, r.logFile
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		r.logFile.Close()
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + r.Host + "/v2/")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		r.Stop()
		return nil, fmt.Errorf("the registry did not answer GET /v2/: %w\n%s", err, harness.TailFile(r.logPath, 20))
	}
	return r, nil
}

// Stop kills the registry.
func (r *Registry) Stop() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.logFile.Close()
}

// LogTail is the end of the registry's log, for failure messages.
func (r *Registry) LogTail(n int) string { return harness.TailFile(r.logPath, n) }
