package httpapi

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoKubernetesClient: the HTTP API reads the election's and the
// partitions' state as values (packages leadership and ownership); it links
// nothing of client-go, so that it cannot reach the API server, nor pull in
// what a client costs to build and to load.
func TestNoKubernetesClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/client-go/") {
			t.Errorf("package httpapi depends on %s", pkg)
		}
	}
}
