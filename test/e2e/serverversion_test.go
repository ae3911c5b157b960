//go:build integration

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestReportsServerVersion: the startup report names the real API
// server's release, read with the sidecar's own credentials, and (on a
// release the project supports: every one `make e2e-matrix` runs) says it
// is in the supported range.
func TestReportsServerVersion(t *testing.T) {
	t.Parallel()
	info, err := controlPlane.AdminClient().Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	c := startCandidate(t, "version", candidateOptions{lease: leaseName(t)})
	want := fmt.Sprintf(`serverVersion=%q supported="1.30–1.37"`, info.GitVersion)
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		for _, l := range strings.Split(c.log(), "\n") {
			if strings.Contains(l, `"API server"`) && strings.Contains(l, want) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the sidecar did not log %s", want)
	}
	t.Logf("the sidecar reported the API server's release: %s", want)
}
