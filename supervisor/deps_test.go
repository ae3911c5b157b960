package supervisor

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubernetesClient: the supervisor is a client of the sidecar's API
// alone; nothing of client-go (or any k8s.io module) is in its import
// graph, but klog, which it logs through as the sidecar does.
func TestNoKubernetesClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/klog/v2" || strings.HasPrefix(pkg, "k8s.io/klog/v2/internal/") {
			continue
		}
		if strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/") {
			t.Errorf("package supervisor depends on %s", pkg)
		}
	}
}
