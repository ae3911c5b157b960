package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// This test builds nothing and starts no process, so it runs in
// `go test ./...`; the rest of the package's tests start etcd and
// kube-apiserver and carry the integration build tag (cluster_test.go).

// TestEnsureBinariesFromEnv checks that a $LEADER_ELECTOR_TOOLS_DIR without
// the binaries is refused rather than used.
func TestEnsureBinariesFromEnv(t *testing.T) {
	t.Setenv(ToolsDirEnv, t.TempDir())
	if _, err := EnsureBinaries(t.Context(), nil); err == nil {
		t.Fatalf("EnsureBinaries with an empty $%s succeeded", ToolsDirEnv)
	}
}

// TestEnsureBinariesWithoutKubectl checks that a tools directory holding
// everything but kubectl is refused with kubectl named when kubectl is asked
// for (the docs' commands run with it, and a missing kubectl must fail the
// suite, never skip them), and accepted when only what Start runs is.
func TestEnsureBinariesWithoutKubectl(t *testing.T) {
	dir := t.TempDir()
	for _, name := range append(binaries, ControllerManager) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(ToolsDirEnv, dir)
	_, err := EnsureBinaries(t.Context(), nil, ControllerManager, Kubectl)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, Kubectl)) {
		t.Fatalf("EnsureBinaries without kubectl: %v, want an error naming %s", err, filepath.Join(dir, Kubectl))
	}
	if got, err := EnsureBinaries(t.Context(), nil); err != nil || got != dir {
		t.Fatalf("EnsureBinaries for etcd and kube-apiserver only: %q, %v; want %q", got, err, dir)
	}
}
