package partition

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leasetimings"
)

// TestMemberDeletesItsMembershipOnShutdown: with ReleaseOnShutdown, a
// member's membership Lease is released and then deleted when Run ends (it
// goes with its pod); without it, the Lease stays.
func TestMemberDeletesItsMembershipOnShutdown(t *testing.T) {
	t.Parallel()
	for _, release := range []bool{true, false} {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		clk := asyncClock{clocktesting.NewFakeClock(t0)}
		client := newFakeAPI(t, clk, testIdentity)
		m, err := New(Config{
			LeaseSpec: election.LeaseSpec{Namespace: testNamespace, Name: testGroup, Identity: testIdentity, ReleaseOnShutdown: release,
				Timings: leasetimings.Timings{LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod}},
			Partitions: 1, Client: client, Clock: clk,
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			return m.Snapshot().Member, nil
		}); err != nil {
			t.Fatalf("never a member: %+v", m.Snapshot())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		_, err = client.Tracker().Get(leasesGVR, testNamespace, MemberLease(testGroup, testIdentity))
		if gone := apierrors.IsNotFound(err); gone != release {
			t.Errorf("ReleaseOnShutdown %v: membership Lease deleted %v (%v), want %v", release, gone, err, release)
		}
	}
}
