package cluster

import "testing"

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
