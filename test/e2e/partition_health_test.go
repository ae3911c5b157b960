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

// TestPartitionsHealthGating: health gating in partition mode. A member
// whose app turns unhealthy hands its partitions to the healthy members
// (through a drain) and takes its share back once healthy; with every app
// unhealthy, nothing moves and every member reports degraded. The monitor
// of newPartitionGroup checks throughout that no partition is claimed twice
// and tokens only grow.
func TestPartitionsHealthGating(t *testing.T) {
	t.Parallel()
	const n = 6
	apps := []*appHealth{newAppHealth(t, true), newAppHealth(t, true), newAppHealth(t, true)}
	lease := leaseName(t)
	members := make([]*candidate, len(apps))
	for i, a := range apps {
		members[i] = (startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{
			lease:       lease,
			extraArgs:   append([]string{fmt.Sprintf("--partitions=%d", n), "--drain-timeout=1s"}, a.args()...),
			startedPath: "/partitions",
		}))
	}
	startPartitionMonitorN(t, func() []*candidate { return members }, n)
	// unhealthyAfter is how long the app's failures take to count:
	// healthFailures probes, a period apart, and one more to be seen.
	unhealthyAfter := time.Duration(healthFailures+1) * healthPeriod
	// shares waits until the members own want[i] partitions each, all n
	// owned once, and returns how long that took.
	shares := func(what string, want []int, since time.Time) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, settleBound+unhealthyAfter, true, func(context.Context) (bool, error) {
			owner := map[int]string{}
			var got []string
			for i, c := range members {
				s, err := c.partitions()
				if err != nil {
					last = err.Error()
					return false, nil
				}
				got = append(got, fmt.Sprintf("%s:%d", c.name, len(s.Owned)))
				if len(s.Owned) != want[i] {
					last = strings.Join(got, " ")
					return false, nil
				}
				for _, o := range s.Owned {
					if prev, dup := owner[o.Partition]; dup {
						last = fmt.Sprintf("partition %d reported by %s and %s", o.Partition, prev, c.name)
						return false, nil
					}
					owner[o.Partition] = c.name
				}
			}
			return len(owner) == n, nil
		})
		if err != nil {
			t.Fatalf("%s: shares %v not reached within %v: %s", what, want, settleBound+unhealthyAfter, last)
		}
		t.Logf("MEASURED partition health gating %s: shares %v after %v", what, want, time.Since(since).Round(time.Millisecond))
	}
	degraded := func(c *candidate) bool {
		s, err := c.partitions()
		if err != nil {
			t.Fatal(err)
		}
		return s.Degraded
	}

	start := time.Now()
	shares("all healthy", []int{2, 2, 2}, start)

	// One app unhealthy: its member gives its partitions to the others.
	start = time.Now()
	apps[0].healthy.Store(false)
	shares("member 0's app unhealthy", []int{0, 3, 3}, start)
	for _, c := range members {
		if degraded(c) {
			t.Errorf("%s reports degraded while healthy members can take the partitions", c.name)
		}
	}
	start = time.Now()
	apps[0].healthy.Store(true)
	shares("member 0's app healthy again", []int{2, 2, 2}, start)

	// Every app unhealthy: nothing moves; every member says why.
	for _, a := range apps {
		a.healthy.Store(false)
	}
	start = time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, unhealthyAfter+2*retryPeriod+e2eSlack, true, func(context.Context) (bool, error) {
		for _, c := range members {
			if !degraded(c) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("not every member reports degraded within %v of every app's failure", unhealthyAfter+2*retryPeriod+e2eSlack)
	}
	t.Logf("MEASURED partition health gating every app unhealthy: every member degraded after %v", time.Since(start).Round(time.Millisecond))
	// Held for a lease duration: the shares stay.
	holdUntil := time.Now().Add(leaseDuration)
	for time.Now().Before(holdUntil) {
		for i, c := range members {
			s, err := c.partitions()
			if err != nil {
				t.Fatal(err)
			}
			if len(s.Owned) != 2 || !s.Degraded {
				t.Fatalf("every app unhealthy: %s owns %d (degraded %t, %q), want its 2 kept", members[i].name, len(s.Owned), s.Degraded, s.DegradedReason)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if s, _ := members[0].partitions(); !strings.Contains(s.DegradedReason, "every member's app is unhealthy") {
		t.Errorf("degradedReason %q, want it to say every member's app is unhealthy", s.DegradedReason)
	}
	for _, a := range apps {
		a.healthy.Store(true)
	}
	start = time.Now()
	// A probe period to see the apps healthy, a renewal to publish it.
	healthyAfter := 2*healthPeriod + 2*retryPeriod + e2eSlack
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, healthyAfter, true, func(context.Context) (bool, error) {
		for _, c := range members {
			if degraded(c) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("a member still reports degraded %v after every app turned healthy", healthyAfter)
	}
	t.Logf("MEASURED partition health gating every app healthy again: no member degraded after %v", time.Since(start).Round(time.Millisecond))
	shares("every app healthy again", []int{2, 2, 2}, start)
}
