//go:build integration

package packaging

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/test/harness"
)

// binary is a leader-elector built from this checkout, to ask it whether it
// accepts the flags the chart and manifests give it.
var binary string

func TestMain(m *testing.M) {
	os.Exit(setUpAndRun(m))
}

func setUpAndRun(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// Install helm and kustomize before any test starts its clock.
	if _, err := Tools(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "packaging setup:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "leader-elector-packaging-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "packaging setup:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "leader-elector")
	if err := harness.BuildBinary(ctx, binary, harness.Build{Output: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "packaging setup: build leader-elector:", err)
		return 1
	}
	return m.Run()
}

// binaryVerdict runs the sidecar with args and a kubeconfig that does not
// exist: it exits 2 if it refuses the configuration, and 1 (no usable client
// configuration) once it has accepted it.
func binaryVerdict(t *testing.T, args []string) (accepted bool) {
	t.Helper()
	cmd := exec.Command(binary, append(args, "--kubeconfig=/nonexistent/kubeconfig")...)
	cmd.Env = []string{"POD_NAME=pod-0", "POD_NAMESPACE=ns"}
	out, err := cmd.CombinedOutput()
	exit, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("leader-elector %v: %v (want exit 1 or 2)\n%s", args, err, out)
	}
	switch exit.ExitCode() {
	case 1:
		return true
	case 2:
		return false
	}
	t.Fatalf("leader-elector %v: exit %d, want 1 or 2\n%s", args, exit.ExitCode(), out)
	return false
}
