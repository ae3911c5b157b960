//go:build integration

// Package e2e runs real leader-elector processes against a real control plane
// (etcd + kube-apiserver started by test/cluster) and injects real faults:
// SIGTERM, SIGKILL, SIGSTOP/SIGCONT of a leader, an API server that is
// frozen or killed, a candidate whose RBAC is wrong.
//
// Nothing here is skipped: missing binaries are built (the first run takes
// several minutes), and any failure to set up fails the suite.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
)

var (
	// controlPlane is shared by all tests; each test uses its own Lease.
	controlPlane *cluster.ControlPlane
	// binary is the leader-elector under test, built with the race detector.
	binary string
	// repoRoot is the repository's top directory.
	repoRoot string
	// kubeBinDir holds etcd and kube-apiserver (cluster.EnsureBinaries);
	// kubeTool finds the other Kubernetes binaries.
	kubeBinDir string
)

func TestMain(m *testing.M) {
	os.Exit(setUpAndRun(m))
}

func setUpAndRun(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	var err error
	if repoRoot, err = harness.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}

	work, err := os.MkdirTemp("", "leader-elector-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}
	keep := os.Getenv("E2E_KEEP_WORKDIR") != ""
	defer func() {
		if !keep {
			os.RemoveAll(work)
		}
	}()

	binary = filepath.Join(work, "leader-elector")
	if err := harness.BuildBinary(ctx, binary, harness.Build{Race: true, Output: os.Stderr}); err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup: build leader-elector:", err)
		return 1
	}

	binDir, err := cluster.EnsureBinaries(ctx, os.Stderr)
	kubeBinDir = binDir
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		return 1
	}
	start := time.Now()
	controlPlane, err = cluster.Start(ctx, cluster.Options{BinDir: binDir, WorkDir: filepath.Join(work, "cluster"), Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup: start control plane:", err)
		return 1
	}
	defer controlPlane.Stop()
	fmt.Fprintf(os.Stderr, "control plane ready in %v at %s\n", time.Since(start).Round(time.Millisecond), controlPlane.Host())

	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "kube-apiserver log: %s (kept: set E2E_KEEP_WORKDIR=1)\n", controlPlane.APIServerLogPath())
	}
	return code
}

// kubeTool returns the path of a Kubernetes binary the control plane does not
// need (cluster.Kubectl, cluster.ControllerManager), built on first use. make
// e2e builds them all before the suite starts (make tools), so no build runs
// beside a test there; the smoke stage (make e2e-smoke) runs no test that
// needs them and so never pays for their cold build.
func kubeTool(t *testing.T, name string) string {
	t.Helper()
	dir, err := cluster.EnsureBinaries(t.Context(), os.Stderr, name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return filepath.Join(dir, name)
}
