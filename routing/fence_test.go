package routing

import (
	"context"
	"testing"
	"time"

	"k8s.io/klog/v2/ktesting"
)

// TestFenceIgnoresWallClockSteps: the write window ends when the claim
// ends on the monotonic clock, even if the wall clock was stepped back
// during the claim (ValidUntil, a wall-clock value, then lies ahead).
func TestFenceIgnoresWallClockSteps(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	s := leading(4)
	s.Deadline = time.Now().Add(200 * time.Millisecond)
	// A wall-clock step of one hour back makes the claim look an hour longer.
	s.ValidUntil = s.Deadline.Round(0).Add(time.Hour)
	f := fence{leadership: newLeadership(s), metrics: newMetrics(ModeLabel)}
	wctx, cancel, err := f.window(ctx, 4)
	if err != nil {
		t.Fatalf("window: %v", err)
	}
	defer cancel()
	deadline, ok := wctx.Deadline()
	if !ok || deadline.After(s.Deadline.Add(time.Millisecond)) {
		t.Errorf("write window ends at %v, want by the claim's end %v", deadline, s.Deadline)
	}
	select {
	case <-wctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("write window still open 5 s after the claim ended")
	}
	if _, _, err := f.window(context.Background(), 4); err == nil {
		t.Error("window opened after the claim ended")
	}
}
