package partition

import (
	"context"
	"reflect"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leasetimings"
)

// TestLeaseGroup: one label-selected watch feeds the registered elector's
// cache and observes the other Leases of the group; a holder counts until
// its lease duration has passed without a change, as this pod observed it.
func TestLeaseGroup(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	labelled := func(name, holder string) *coordinationv1.Lease {
		l := groupLease(name, KindMember, holder, 1)
		l.Labels = map[string]string{"group": "g"}
		return l
	}
	other := labelled("elsewhere-m-c", "pod-c")
	other.Labels = map[string]string{"group": "other"}
	// pod-d's membership Lease was last renewed a lease duration before
	// this pod started: it is gone, though this pod has just seen it.
	dead := labelled("g-m-d", "pod-d")
	dead.Spec.RenewTime.Time = t0.Add(-15 * time.Second)
	// The live member publishes a label; the dead one's is not counted.
	live := labelled("g-m-a", "pod-a")
	live.Labels["n"] = "8"
	dead.Labels["n"] = "4"
	clk := asyncClock{clocktesting.NewFakeClock(t0)}
	client := newFakeAPI(t, clk, testIdentity, live, labelled("g-m-b", ""), dead, labelled("g-p0", "pod-a"), other)

	changes := make(chan struct{}, 100)
	group := NewLeaseGroup(testNamespace, map[string]string{"group": "g"}, client, clk, func() { changes <- struct{}{} })
	e, err := election.New(election.Config{
		LeaseSpec: election.LeaseSpec{Namespace: testNamespace, Name: "g-p0", Identity: testIdentity,
			Timings: leasetimings.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}},
		Client: client, Group: election.GroupMember{Feed: group}, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	go group.Run(ctx)

	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return reflect.DeepEqual(group.Holders("g-m-"), []string{"pod-a"}) && e.Snapshot().Holder == "pod-a", nil
	}); err != nil {
		t.Fatalf("Holders = %v, elector sees %q; want [pod-a] from the group's watch", group.Holders("g-m-"), e.Snapshot().Holder)
	}
	if got := group.HolderLabels("g-m-", "n"); !reflect.DeepEqual(got, map[string]string{"pod-a": "8"}) {
		t.Errorf("HolderLabels = %v, want pod-a's label only", got)
	}
	if got := group.HolderLabels("g-m-", "missing"); !reflect.DeepEqual(got, map[string]string{"pod-a": ""}) {
		t.Errorf("HolderLabels of a label no Lease has = %v, want pod-a with \"\"", got)
	}
	if got := group.Holders("g-p"); len(got) != 0 {
		t.Errorf("Holders(g-p) = %v: a Lease fed to an elector is not observed separately", got)
	}
	if err := group.Feed(testNamespace, "g-p1", nil); err == nil {
		t.Errorf("registering after the watch started was accepted")
	}
	clk.Step(15 * time.Second)
	if got := group.Holders("g-m-"); len(got) != 0 {
		t.Errorf("Holders after a lease duration without renewal = %v, want none", got)
	}
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Errorf("no change reported")
	}
}
