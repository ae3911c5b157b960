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
// everything but kubectl is refused with kubectl named: the docs' commands
// run with it, and a missing kubectl must fail the suite, never skip them.
func TestEnsureBinariesWithoutKubectl(t *testing.T) {
	dir := t.TempDir()
	for _, name := range builtBinaries {
		if name == Kubectl {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(ToolsDirEnv, dir)
	_, err := EnsureBinaries(t.Context(), nil)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, Kubectl)) {
		t.Fatalf("EnsureBinaries without kubectl: %v, want an error naming %s", err, filepath.Join(dir, Kubectl))
	}
}
