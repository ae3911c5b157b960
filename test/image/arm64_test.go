//go:build integration

package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestArm64ImageBinary runs the arm64 image's own binary, taken from the
// archive, under qemu-user (Debian's qemu-user-static, make qemu-deps; no
// binfmt_misc registration, so not in containerd): --version, then an
// election against the control plane and a release on SIGTERM. The amd64
// image runs in containerd (TestElectsInContainer); without this, nothing
// would ever execute what an arm64 node pulls.
func TestArm64ImageBinary(t *testing.T) {
	var img *platformImage
	for _, i := range images {
		if i.platform == "linux/arm64" {
			img = i
		}
	}
	if img == nil || img.files["leader-elector"] == nil {
		t.Fatal("the archive has no linux/arm64 image with /leader-elector")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "leader-elector")
	if err := os.WriteFile(bin, img.files["leader-elector"].data, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	wrapper, err := harness.Arm64Program(ctx, bin, wantVersion)
	if err != nil {
		t.Fatal(err)
	}
	const lease = "arm64-image"
	start := time.Now()
	c, err := harness.StartCandidate(ctx, harness.CandidateOptions{
		Binary:     wrapper,
		Name:       "arm64-image",
		Lease:      lease,
		Kubeconfig: controlPlane.AdminKubeconfig(),
		Timings:    harness.Timings{LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond},
		LogPath:    filepath.Join(dir, "arm64.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Kill()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := c.API().Leader(ctx)
		return err == nil && s.IsLeader, nil
	})
	if err != nil {
		t.Fatalf("the arm64 binary did not lead within 30 s: %v\n%s", err, c.LogTail(40))
	}
	elected := time.Since(start)
	if holder := harnesstest.LeaseHolder(t, controlPlane, "default", lease); holder != "arm64-image" {
		t.Errorf("the Lease names %q, want arm64-image", holder)
	}
	if err := c.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code, err := c.WaitExit(ctx, 15*time.Second); err != nil || code != 0 {
		t.Fatalf("after SIGTERM: exit code %d, %v; want 0\n%s", code, err, c.LogTail(40))
	}
	if holder := harnesstest.LeaseHolder(t, controlPlane, "default", lease); holder != "" {
		t.Errorf("after SIGTERM the Lease names %q, want it released", holder)
	}
	if !strings.Contains(c.Log(), "Released lease") {
		t.Errorf("the arm64 binary did not log its release")
	}
	t.Logf("checked under %s: the arm64 image's /leader-elector printed its version %s, led %s %v after start, released it and exited 0 on SIGTERM", harness.QemuAarch64, wantVersion, lease, elected.Round(time.Millisecond))
}
