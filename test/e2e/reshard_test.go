//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/partition"
)

// TestPartitionsReshard changes a group's partition count through rolling
// updates, 16 → 32 → 8: pods with the old and the new count run together
// in one group for a while. Each partition is a Lease of its own, so no
// partition is ever owned twice (the partition monitor checks every answer
// of every member over the whole run). Each member publishes its count on
// its membership Lease and the group works with the smallest (the effective
// N): while counts are mixed, the old and the new pods together own every
// partition below it, fairly, and nothing above it — so at 32 → 8 the new
// pods own their share and are ready while the old pods still run (a
// rollout with maxUnavailable 0 completes). Once every pod has the new
// count the assignment is full and fair at it. Checkpoints stay with their
// partition's Lease: partitions 0..15 keep theirs through the split to 32
// (16..31 start without), and after the merge to 8 the Leases of partitions
// 8..31 keep their last checkpoints, orphaned, for the app to merge.
func TestPartitionsReshard(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	var mu sync.Mutex
	var all []*candidate
	startPartitionMonitorN(t, func() []*candidate {
		mu.Lock()
		defer mu.Unlock()
		return append([]*candidate(nil), all...)
	}, 32)
	next := 0
	start := func(n, count int) []*candidate {
		var out []*candidate
		for range count {
			c := startCandidate(t, fmt.Sprintf("%s-%d", lease, next), candidateOptions{
				lease:       lease,
				extraArgs:   []string{fmt.Sprintf("--partitions=%d", n), "--drain-timeout=0s"},
				startedPath: "/partitions",
			})
			next++
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			out = append(out, c)
		}
		return out
	}
	stop := func(cs []*candidate) {
		for _, c := range cs {
			c.signal(syscall.SIGTERM)
			if code, err := c.waitExit(giveUp); err != nil || code != 0 {
				t.Fatalf("%s: exit %d, %v", c.name, code, err)
			}
		}
	}
	waitFull := func(what string, members []*candidate, n int, since time.Time) {
		t.Helper()
		var last string
		if err := wait.PollUntilContextTimeout(context.Background(), pollInterval, settleBound, true, func(context.Context) (bool, error) {
			ok, why := fairNowN(members, n)
			last = why
			return ok, nil
		}); err != nil {
			t.Fatalf("%s: no full and fair assignment of %d partitions: %s", what, n, last)
		}
		t.Logf("MEASURED reshard %s: full and fair assignment of %d partitions after %v", what, n, time.Since(since).Round(time.Millisecond))
	}

	// 16 partitions; each owner checkpoints its partitions.
	began := time.Now()
	old := start(16, 2)
	waitFull("2 pods at N=16", old, 16, began)
	checkpointAll(t, old, "before-reshard")

	// Rolling update to 32: two new pods join; the group works on 0..15
	// until the old ones leave, all four sharing them.
	began = time.Now()
	mid := start(32, 2)
	mixed := append(append([]*candidate(nil), old...), mid...)
	waitFull("16→32 with 2 pods at 16 and 2 at 32", mixed, 16, began)
	waitMixedReadyAndFair(t, mixed, 16, began)
	checkCheckpoints(t, mixed, func(i int) string { return "before-reshard" })
	stopped := time.Now()
	stop(old)
	waitFull("rolled to N=32 (from the old pods' SIGTERM)", mid, 32, stopped)
	checkCheckpoints(t, mid, func(i int) string {
		if i < 16 {
			return "before-reshard"
		}
		return ""
	})
	checkpointAll(t, mid, "at-32")

	// Rolling update to 8: the old pods give up 8..31 and share 0..7 with
	// the new ones, which own their share and are ready while the old
	// pods still run. The Leases of 8..31 keep their checkpoints.
	began = time.Now()
	last := start(8, 2)
	mixed = append(append([]*candidate(nil), mid...), last...)
	waitNewPodsOwnTheirShare(t, last, 8, len(mixed), began)
	waitFull("32→8 with 2 pods at 32 and 2 at 8", mixed, 8, began)
	waitMixedReadyAndFair(t, mixed, 8, began)
	for _, c := range mid {
		if !c.running() {
			t.Fatalf("%s, at N=32, exited before the rollout ended", c.name)
		}
	}
	checkCheckpoints(t, mixed, func(int) string { return "at-32" })
	stopped = time.Now()
	stop(mid)
	waitFull("rolled to N=8 (from the old pods' SIGTERM)", last, 8, stopped)
	checkCheckpoints(t, last, func(int) string { return "at-32" })
	for i := 8; i < 32; i++ {
		l, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), partition.PartitionLease(lease, i), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Lease of partition %d, beyond N=8: %v", i, err)
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("partition %d, beyond N=8, is held by %q", i, *l.Spec.HolderIdentity)
		}
		if a := l.Annotations[partition.CheckpointAnnotation]; a == "" {
			t.Errorf("partition %d, beyond N=8, lost its checkpoint", i)
		}
	}
}

// waitNewPodsOwnTheirShare waits until each of the new pods owns at least
// its share ⌊n/members⌋ of the partitions below n while the old pods, with a
// larger N, still run.
func waitNewPodsOwnTheirShare(t *testing.T, pods []*candidate, n, members int, since time.Time) {
	t.Helper()
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), pollInterval, settleBound, true, func(context.Context) (bool, error) {
		for _, c := range pods {
			s, err := c.partitions()
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if owned := ownedList(s); len(owned) < n/members || slices.ContainsFunc(owned, func(p int) bool { return p >= n }) {
				last = fmt.Sprintf("%s (N=%d) owns %v, want %d of 0..%d (members: %d)", c.name, s.Partitions, owned, n/members, n-1, s.Members)
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the new pods at N=%d do not own their share while the old pods run: %s", n, last)
	}
	t.Logf("MEASURED the new pods at N=%d own their share %v after they started", n, time.Since(since).Round(time.Millisecond))
}

// waitMixedReadyAndFair waits, from when the members' settling grace for
// readiness (lease duration + 4 retry periods from the join at since) has
// passed, for a moment when the group with mixed counts has a full and fair
// assignment of the effective N n and every member answers /readyz 200:
// readiness then rests on each member owning its share, not on the grace.
// (It does not require that every poll in between be so: on this shared
// machine a renewal can miss its deadline and a partition move once.)
func waitMixedReadyAndFair(t *testing.T, members []*candidate, n int, since time.Time) {
	t.Helper()
	graceEnds := since.Add(leaseDuration + 4*retryPeriod)
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, time.Until(graceEnds)+settleBound, true, func(context.Context) (bool, error) {
		if time.Now().Before(graceEnds) {
			last = "the settling grace has not passed yet"
			return false, nil
		}
		if ok, why := fairNowN(members, n); !ok {
			last = why
			return false, nil
		}
		for _, c := range members {
			if code, body, err := c.probe("/readyz"); code != 200 {
				last = fmt.Sprintf("%s: /readyz %d %q %v", c.name, code, body, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("with mixed partition counts (effective N %d), no moment past the settling grace with every member ready and a full and fair assignment: %s", n, last)
	}
	var shares []string
	for _, c := range members {
		s, err := c.partitions()
		if err != nil {
			t.Fatal(err)
		}
		shares = append(shares, fmt.Sprintf("%s (N=%d, effective %d) owns %v", c.name, s.Partitions, s.EffectivePartitions, ownedList(s)))
	}
	t.Logf("MEASURED mixed partition counts: every member ready and a full and fair assignment of %d past the settling grace, %v after the new pods started: %s", n, time.Since(since).Round(time.Millisecond), strings.Join(shares, "; "))
}

func ownedList(s api.Partitions) []int {
	var out []int
	for _, o := range s.Owned {
		out = append(out, o.Partition)
	}
	return out
}

// checkpointAll stores "<prefix>-p<i>" on every partition each member owns.
func checkpointAll(t *testing.T, members []*candidate, prefix string) {
	t.Helper()
	for _, c := range members {
		s, err := c.partitions()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range s.Owned {
			if _, err := c.api().Checkpoint(context.Background(), o.Partition, fmt.Sprintf("%s-p%d", prefix, o.Partition)); err != nil {
				t.Fatalf("%s: checkpoint of partition %d: %v", c.name, o.Partition, err)
			}
		}
	}
}

// checkCheckpoints checks that every partition the members own shows the
// checkpoint "<want(i)>-p<i>", or none if want(i) is "".
func checkCheckpoints(t *testing.T, members []*candidate, want func(i int) string) {
	t.Helper()
	for _, c := range members {
		s, err := c.partitions()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range s.Owned {
			w := want(o.Partition)
			switch {
			case w == "" && o.Checkpoint != nil:
				t.Errorf("partition %d: checkpoint %q, want none", o.Partition, o.Checkpoint.Value)
			case w != "" && (o.Checkpoint == nil || o.Checkpoint.Value != fmt.Sprintf("%s-p%d", w, o.Partition)):
				t.Errorf("partition %d: checkpoint %+v, want %s-p%d", o.Partition, o.Checkpoint, w, o.Partition)
			}
		}
	}
}
