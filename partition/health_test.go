package partition

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/leader-elector/leader-elector/ownership"
)

// fixedHealth is an app whose health the test sets.
type fixedHealth struct{ healthy atomic.Bool }

func (f *fixedHealth) Healthy() (bool, error) {
	if f.healthy.Load() {
		return true, nil
	}
	return false, errors.New("503")
}

// unhealthyMember is a live pod's membership Lease that says its app is
// unhealthy.
func unhealthyMember(identity string) *coordinationv1.Lease {
	l := memberLease(identity)
	l.Labels[AppHealthyLabel] = "false"
	return l
}

// TestMemberSharesAmongHealthyMembers: a member whose membership Lease
// says its app is unhealthy gets no share, also in the view of a member
// without gating (a rollout that turns gating on must not leave
// partitions unowned); a member without the label counts as healthy.
func TestMemberSharesAmongHealthyMembers(t *testing.T) {
	t.Parallel()
	mt := startMember(t, 6, unhealthyMember("pod-b"), memberLease("pod-c"),
		partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3), partitionLease(4, "", 3), partitionLease(5, "", 3))
	s := mt.waitFor("pod-a to own half of 6 (pod-b unhealthy)", func(s ownership.State) bool {
		return s.Members == 3 && len(s.Owned) == 3
	})
	if s.FairShareMin != 3 || s.FairShareMax != 3 || s.Degraded {
		t.Errorf("fair share %d..%d, degraded %t; want 3..3 among the two healthy members, not degraded", s.FairShareMin, s.FairShareMax, s.Degraded)
	}
}

// TestMemberDegradedWhenEveryAppIsUnhealthy: with every app unhealthy the
// partitions are shared among all members as without gating, the member
// says why (a fixed text, so that the probe's changing errors do not wake
// every long-poll), and it publishes its own health on its membership
// Lease.
func TestMemberDegradedWhenEveryAppIsUnhealthy(t *testing.T) {
	t.Parallel()
	app := &fixedHealth{}
	leases := []runtime.Object{unhealthyMember("pod-b"), unhealthyMember("pod-c")}
	for i := range 6 {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMemberWith(t, 6, func(c *Config) { c.AppHealth = app }, func(*fake.Clientset) {}, leases...)
	// pod-b and pod-c, played by the test, take none of the free
	// partitions they are the preferred takers of (FreeToTry): pod-a
	// tries those once they have been free for longFreeAfter.
	mt.waitFor("pod-a a member, degraded", func(s ownership.State) bool { return s.Members == 3 && s.Degraded })
	mt.settle()
	mt.clock.Step(mt.m.longFreeAfter())
	s := mt.waitFor("pod-a degraded, with its even share", func(s ownership.State) bool {
		return s.Members == 3 && len(s.Owned) == 2 && s.Degraded
	})
	if !strings.Contains(s.DegradedReason, "every member's app is unhealthy") || strings.Contains(s.DegradedReason, "503") {
		t.Errorf("degradedReason %q: want the fixed text, without the probe's error", s.DegradedReason)
	}
	mt.waitForLease("pod-a's membership Lease to say its app is unhealthy", MemberLease(testGroup, testIdentity), func(l *coordinationv1.Lease) bool {
		return l.Labels[AppHealthyLabel] == "false"
	})
	// Healthy: no longer degraded, the share of the one healthy member.
	app.healthy.Store(true)
	mt.m.AppHealthChanged()
	mt.waitFor("pod-a, the one healthy member, to own all 6", func(s ownership.State) bool {
		return len(s.Owned) == 6 && !s.Degraded
	})
	mt.waitForLease("pod-a's membership Lease to say its app is healthy", MemberLease(testGroup, testIdentity), func(l *coordinationv1.Lease) bool {
		return l.Labels[AppHealthyLabel] == "true"
	})
}
