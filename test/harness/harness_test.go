package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestFreePortsAreDistinct(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ports)
	if len(slices.Compact(ports)) != 5 || ports[0] == 0 {
		t.Errorf("ports %v, want 5 distinct non-zero ones", ports)
	}
}

// The ports come from below the kernel's ephemeral range, where no
// outgoing connection can take one before its caller binds it.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low-drawFloor < 1000 {
		t.Fatalf("ephemeral range starts at %d: this test needs Linux's ip_local_port_range above %d", low, drawFloor+1000)
	}
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		if p < drawFloor || p >= low {
			t.Errorf("port %d outside [%d, %d)", p, drawFloor, low)
		}
	}
}

func TestRepoRootHoldsThisModule(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "harness", "repo.go")); err != nil {
		t.Errorf("RepoRoot() = %s, which does not hold this package: %v", root, err)
	}
	// test/tools/kube has a go.mod of another module.
	if isRepoRoot(filepath.Join(root, "test", "tools", "kube")) {
		t.Error("test/tools/kube taken for the repository root")
	}
}

func TestCommandLine(t *testing.T) {
	o := CandidateOptions{
		Name: "pod-a", Lease: "app", Kubeconfig: "kc",
		Timings: Timings{LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond},
		APIPort: 4040, ProbePort: 8080, Args: []string{"-v=2"},
	}
	want := "--lease-name=app --lease-namespace=default --identity=pod-a --kubeconfig=kc --lease-duration=4s --renew-deadline=2s --retry-period=500ms --http-address=127.0.0.1:4040 --probe-address=127.0.0.1:8080 -v=2"
	if got := strings.Join(commandLine(o), " "); got != want {
		t.Errorf("command line\n got %s\nwant %s", got, want)
	}
	o.NoProbeServer = true
	if got := strings.Join(commandLine(o), " "); strings.Contains(got, "--probe-address") {
		t.Errorf("without a probe server: %s", got)
	}
	o.Bare = true
	if got := commandLine(o); !slices.Equal(got, []string{"-v=2"}) {
		t.Errorf("bare: %q, want Args alone", got)
	}
}

func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("1\n2\n3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := TailFile(path, 2); got != "2\n3" {
		t.Errorf("TailFile = %q", got)
	}
	if got := TailFile(filepath.Join(t.TempDir(), "none"), 2); got != "" {
		t.Errorf("TailFile of no file = %q", got)
	}
}
