//go:build integration

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/partition"
)

// TestPartitionsReshard changes a group's partition count through rolling
// updates, 16 → 32 → 8: pods with the old and the new count run together
// in one group for a while. Each partition is a Lease of its own, so no
// partition is ever owned twice (the partition monitor checks every answer
// of every member over the whole run). While counts are mixed, each pod
// computes its fair share with its own count, so the group does not cover
// every partition of the larger count (measured and logged); once every pod
// has the new count the assignment is full and fair again. Checkpoints stay
// with their partition's Lease: partitions 0..15 keep theirs through the
// split to 32 (16..31 start without), and after the merge to 8 the Leases
// of partitions 8..31 keep their last checkpoints, orphaned, for the app to
// merge.
func TestPartitionsReshard(t *testing.T) {
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
			if code, err := c.waitExit(10 * time.Second); err != nil || code != 0 {
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
		t.Logf("MEASURED reshard %s: full and fair assignment after %v", what, time.Since(since).Round(time.Millisecond))
	}

	// 16 partitions; each owner checkpoints its partitions.
	began := time.Now()
	old := start(16, 2)
	waitFull("2 pods at N=16", old, 16, began)
	checkpointAll(t, old, "before-reshard")

	// Rolling update to 32: two new pods join, then the old ones leave.
	began = time.Now()
	mid := start(32, 2)
	mixed := append(append([]*candidate(nil), old...), mid...)
	owned, unowned := waitMixedSettled(t, mixed, 32)
	t.Logf("MEASURED reshard 16→32 with 2 pods at 16 and 2 at 32: %d of 32 partitions owned once the shares settled (unowned: %v)", owned, unowned)
	stop(old)
	waitFull("rolled to N=32", mid, 32, began)
	checkCheckpoints(t, mid, func(i int) string {
		if i < 16 {
			return "before-reshard"
		}
		return ""
	})
	checkpointAll(t, mid, "at-32")

	// Rolling update to 8: the Leases of 8..31 keep their checkpoints.
	began = time.Now()
	last := start(8, 2)
	owned, unowned = waitMixedSettled(t, append(append([]*candidate(nil), mid...), last...), 32)
	t.Logf("MEASURED reshard 32→8 with 2 pods at 32 and 2 at 8: %d of 32 partitions owned once the shares settled (unowned: %v)", owned, unowned)
	stop(mid)
	waitFull("rolled to N=8", last, 8, began)
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

// waitMixedSettled waits until every member of a group with mixed
// partition counts sees all of them and the owned set has not changed for
// one lease duration; it logs what each member owns against its own fair
// share and its readiness, and returns how many of partitions 0..max-1 are
// owned and which are not.
func waitMixedSettled(t *testing.T, members []*candidate, max int) (int, []int) {
	t.Helper()
	var (
		last   string
		prev   string
		stable time.Time
		owned  map[int]bool
		shares []string
	)
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, 3*settleBound, true, func(context.Context) (bool, error) {
		owned, shares = map[int]bool{}, nil
		for _, c := range members {
			s, err := c.partitions()
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if s.Members != len(members) {
				last = fmt.Sprintf("%s: %d members", c.name, s.Members)
				stable = time.Time{}
				return false, nil
			}
			code, _, _ := c.probe("/readyz")
			shares = append(shares, fmt.Sprintf("%s (N=%d) owns %d, fair share %d..%d, /readyz %d", c.name, s.Partitions, len(s.Owned), s.FairShare.Min, s.FairShare.Max, code))
			for _, o := range s.Owned {
				if owned[o.Partition] {
					// A handover between two answers; the monitor
					// checks the claims themselves.
					last = fmt.Sprintf("partition %d reported by two members", o.Partition)
					return false, nil
				}
				owned[o.Partition] = true
			}
		}
		// Readiness may flip while the owned set stands still; only the
		// owned set must be stable.
		key := fmt.Sprint(len(owned), owned)
		if key != prev || stable.IsZero() {
			prev, stable = key, time.Now()
			return false, nil
		}
		return time.Since(stable) >= leaseDuration, nil
	})
	if err != nil {
		t.Fatalf("mixed partition counts did not settle: %v (%s)", err, last)
	}
	var unowned []int
	for i := range max {
		if !owned[i] {
			unowned = append(unowned, i)
		}
	}
	t.Logf("settled with mixed partition counts: %s", strings.Join(shares, "; "))
	return len(owned), unowned
}
