//go:build integration

package e2e

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestArm64Binary runs the arm64 build of the sidecar, cross-built as the
// shipped build does (`make build`: the Dockerfile's flags, CGO off), under
// qemu-user against the real API server: --version, an election it wins,
// and a graceful release on SIGTERM that a native candidate takes over.
// A broken arm64 build (one that does not start, elect or release) fails
// here rather than on a user's arm64 node.
func TestArm64Binary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	dir := t.TempDir()
	bin := filepath.Join(dir, "leader-elector-arm64")
	start := time.Now()
	build := exec.CommandContext(ctx, "make", "--no-print-directory", "build", "BUILD_OUTPUT="+bin)
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH=arm64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build for arm64: %v\n%s", err, out)
	}
	t.Logf("built the arm64 binary in %v", time.Since(start).Round(time.Millisecond))
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	machine := f.Machine
	f.Close()
	if machine != elf.EM_AARCH64 {
		t.Fatalf("make build with GOARCH=arm64 produced a %v binary, want EM_AARCH64", machine)
	}

	version, err := os.ReadFile(filepath.Join(repoRoot, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	wrapper, err := harness.Arm64Program(ctx, bin, strings.TrimSpace(string(version)))
	if err != nil {
		t.Fatal(err)
	}

	lease := leaseName(t)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	start = time.Now()
	arm := startCandidate(t, "arm64", candidateOptions{lease: lease, binary: wrapper})
	g.Add(arm)
	if leader := g.WaitLeader(giveUp); leader != arm {
		t.Fatalf("%s leads, want the arm64 candidate", leader.name)
	}
	elected := time.Since(start)
	native := startCandidate(t, "amd64", candidateOptions{lease: lease})
	g.Add(native)
	harnesstest.WaitFollowing(t, native, arm)
	before, err := arm.state()
	if err != nil {
		t.Fatal(err)
	}

	sent := time.Now()
	arm.signal(syscall.SIGTERM)
	// Released at once, or, should the emulated process's write be slow,
	// at the latest at the expiry of its last renewal: takeoverBound.
	if next := g.WaitLeader(takeoverBound, arm); next != native {
		t.Fatalf("%s leads after the arm64 candidate's SIGTERM, want the native one", next.name)
	}
	took := time.Since(sent)
	if code, err := arm.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("arm64 candidate exit code %d, %v; want 0", code, err)
	}
	if !strings.Contains(arm.log(), "Released lease") {
		t.Errorf("the arm64 candidate did not log its release")
	}
	got, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.Spec.HolderIdentity; h == nil || *h != native.name {
		t.Errorf("Lease holder after the handover = %v, want %s", h, native.name)
	}
	var after int64
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		s, err := native.state()
		after = s.FencingToken
		return err == nil && s.IsLeader, nil
	})
	if err != nil || after <= before.FencingToken {
		t.Errorf("native leader's fencing token %d after the handover (%v), was %d under arm64", after, err, before.FencingToken)
	}
	t.Logf("MEASURED arm64 under qemu: elected %v after start; graceful handover to the native candidate %v after SIGTERM (token %d → %d)",
		elected.Round(time.Millisecond), took.Round(time.Millisecond), before.FencingToken, after)
}
