package election

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2/ktesting"
)

// TestElectorDeleteOnShutdown: with DeleteOnShutdown the Lease is released
// and then deleted when Run ends.
func TestElectorDeleteOnShutdown(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, append([]string{"delete"}, electorVerbs...))
	cfg := fastConfig(client)
	cfg.ReleaseOnShutdown, cfg.DeleteOnShutdown = true, true
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stop := runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	if err := stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := client.Tracker().Get(leasesGVR, testNamespace, testName); !apierrors.IsNotFound(err) {
		t.Errorf("Lease after shutdown: %v, want it deleted", err)
	}
}
