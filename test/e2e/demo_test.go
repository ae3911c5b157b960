//go:build integration

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
)

// TestDemoOnExistingCluster: `make demo` with KUBECONFIG set (here: the
// suite's control plane, started before) builds and starts no control
// plane, runs its handovers in a namespace of its own on that cluster, and
// deletes that namespace at the end.
func TestDemoOnExistingCluster(t *testing.T) {
	text := runDemo(t, "go", "run", "./test/demo")
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

// runDemo runs a demo command in the repository, with KUBECONFIG naming the
// suite's control plane, to its end; it fails the test unless the command
// succeeds within 5 minutes, and returns the output.
func runDemo(t *testing.T, command ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, command[0], command[1:]...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "KUBECONFIG="+controlPlane.AdminKubeconfig())
	out, err := cmd.CombinedOutput()
	t.Logf("%s output:\n%s", strings.Join(command, " "), out)
	if err != nil {
		t.Fatalf("%s: %v", strings.Join(command, " "), err)
	}
	return string(out)
}

// TestDemoHold: `make demo HOLD=1` ends its script with all three
// candidates running again, prints how to reach each (the kubeconfig, a
// curl of each API, the status command), and the APIs it prints answer,
// one of them leading; Ctrl-C then ends it cleanly.
func TestDemoHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Built, not go run: the exit code is then the demo's own.
	demo := filepath.Join(t.TempDir(), "demo")
	build := exec.CommandContext(ctx, "go", "build", "-o", demo, "./test/demo")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./test/demo: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, demo, "-hold")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "KUBECONFIG="+controlPlane.AdminKubeconfig())
	// Ctrl-C reaches the whole process group: the demo and its candidates.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out harness.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 4*time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "Try: kill"), nil
	}); err != nil {
		t.Fatalf("the demo never printed how to explore:\n%s", out.String())
	}
	text := out.String()
	if m := regexp.MustCompile(`The kubeconfig: (\S+) `).FindStringSubmatch(text); m == nil {
		t.Error("the demo did not print its kubeconfig")
	} else if _, err := os.Stat(m[1]); err != nil {
		t.Errorf("the kubeconfig the demo printed: %v", err)
	}
	access := regexp.MustCompile(`(pod-[abc]) \(pid \d+\): curl -s (http://\S+)/leader   or   LEADER_ELECTOR_URL=(\S+) \S+ status`).FindAllStringSubmatch(text, -1)
	if len(access) != 3 {
		t.Fatalf("want a curl and a status command for each of the 3 candidates, got %d:\n%s", len(access), text)
	}
	leaders := 0
	for _, a := range access {
		if a[2] != a[3] {
			t.Errorf("%s: curl names %s, status %s", a[1], a[2], a[3])
		}
		s, err := api.NewClient(a[2], nil).Leader(ctx)
		if err != nil {
			t.Fatalf("%s: the printed API %s does not answer: %v", a[1], a[2], err)
		}
		if s.IsLeader {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d of the printed candidates lead, want 1", leaders)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("the demo did not end cleanly on Ctrl-C: %v\n%s", err, out.String())
	}
}

// TestDemoLocal: `make demo-local` runs the demo's script on a lease file:
// no control plane (a KUBECONFIG in the environment is ignored), each
// leader's supervised child starts, the app's event stream says "lost" on
// the release, the graceful handover and the crash takeover happen, and it
// exits 0.
func TestDemoLocal(t *testing.T) {
	text := runDemo(t, "make", "--no-print-directory", "demo-local")
	for _, want := range []string{
		`No control plane: the candidates elect through the lease file \S+lease\.json`,
		`(pod-[abc])'s event stream: event: lost, reason "released", fencing token \d+`,
		`pod-[abc] exited with code 0; pod-[abc] leads [0-9.]+m?s after the SIGTERM`,
		`pod-[abc] leads [0-9.]+m?s after the SIGKILL`,
		`Done\. Run with HOLD=1 \(make demo-local HOLD=1\)`,
	} {
		if !regexp.MustCompile(want).MatchString(text) {
			t.Errorf("the output has no line matching %q", want)
		}
	}
	// Four terms (the first election, the release, SIGTERM, SIGKILL): each
	// leader's child starts once, and the tokens grow.
	starts := regexp.MustCompile(`pod-[abc]'s child: started: leading with fencing token (\d+)`).FindAllStringSubmatch(text, -1)
	if len(starts) != 4 {
		t.Fatalf("%d supervised children started, want 4 (one per term)", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		prev, _ := strconv.ParseInt(starts[i-1][1], 10, 64)
		if cur, _ := strconv.ParseInt(starts[i][1], 10, 64); cur <= prev {
			t.Errorf("child %d started with token %d after %d", i, cur, prev)
		}
	}
	if strings.Contains(text, "Control plane ready") || strings.Contains(text, "Using the cluster") || strings.Contains(text, "etcd") {
		t.Error("demo-local built, started or used a control plane")
	}
}
