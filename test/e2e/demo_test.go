//go:build integration

package e2e

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestDemoOnExistingCluster: `make demo` with KUBECONFIG set (here: the
// suite's control plane, started before) builds and starts no control
// plane, runs its handovers in a namespace of its own on that cluster, and
// deletes that namespace at the end.
func TestDemoOnExistingCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./test/demo")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "KUBECONFIG="+controlPlane.AdminKubeconfig())
	out, err := cmd.CombinedOutput()
	t.Logf("demo output:\n%s", out)
	if err != nil {
		t.Fatalf("demo: %v", err)
	}
	text := string(out)
	if !strings.Contains(text, "Using the cluster at "+controlPlane.Host()) {
		t.Errorf("the demo did not say it uses the cluster at %s", controlPlane.Host())
	}
	if strings.Contains(text, "Building the control plane") || strings.Contains(text, "Control plane ready") {
		t.Errorf("the demo built or started a control plane although KUBECONFIG was set")
	}
	if !regexp.MustCompile(`pod-[abc] leads [0-9.]+m?s after the SIGKILL`).MatchString(text) {
		t.Errorf("the demo did not get through the crash failover")
	}
	m := regexp.MustCompile(`Deleted namespace (leader-elector-demo-[a-z0-9]+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatal("the demo did not delete its namespace")
	}
	// Without a namespace controller a deleted namespace stays Terminating:
	// deleted is what the demo can do.
	ns, err := controlPlane.AdminClient().CoreV1().Namespaces().Get(context.Background(), m[1], metav1.GetOptions{})
	if err == nil && ns.DeletionTimestamp == nil {
		t.Errorf("namespace %s is still there, not being deleted", m[1])
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
