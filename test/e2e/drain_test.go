//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// TestPartitionsDrainAppRelease: when a member joins, the member above its
// share shows the partition it is to hand over as draining (in GET
// /partitions and as an event of GET /events) with a deadline, keeps it
// meanwhile, and hands it over as soon as the app has checkpointed and
// released it; every partition moved this way reaches the new member with
// the old owner's checkpoint, long before the (long) drain timeout.
func TestPartitionsDrainAppRelease(t *testing.T) {
	t.Parallel()
	const drainTimeout = 60 * time.Second
	g := newPartitionGroup(t, candidateOptions{extraArgs: []string{fmt.Sprintf("--drain-timeout=%v", drainTimeout)}})
	a := g.join(1)[0]
	g.waitFair("one member", time.Now())

	events := drainingEvents(t, a)
	start := time.Now()
	b := g.join(1)[0]
	moved := map[int]string{}
	for len(moved) < partitionCount/2 {
		o := waitDraining(t, a, drainTimeout)
		seen := time.Now()
		if len(moved) == 0 {
			// Set when the drain began, seen by the next poll: within
			// e2eSlack of it.
			t.Logf("MEASURED drain deadline seen %v after it was set", (drainTimeout - o.DrainDeadline.Sub(seen)).Round(time.Millisecond))
			if left := o.DrainDeadline.Sub(seen); left < drainTimeout-e2eSlack || left > drainTimeout {
				t.Errorf("drain deadline %v is %v away, want about %v", o.DrainDeadline, left, drainTimeout)
			}
			select {
			case e := <-events:
				if !strings.Contains(e, fmt.Sprintf(`"partition":%d,`, o.Partition)) {
					t.Errorf("GET /events: the first draining event %q is not about partition %d", e, o.Partition)
				}
			case <-time.After(giveUp):
				t.Errorf("GET /events sent no event with a draining partition")
			}
		}
		value := fmt.Sprintf("drained by %s at token %d", a.name, o.FencingToken)
		if _, err := a.api().Checkpoint(context.Background(), o.Partition, value); err != nil {
			t.Fatalf("checkpoint of draining partition %d: %v", o.Partition, err)
		}
		if _, err := a.api().ReleasePartition(context.Background(), o.Partition); err != nil {
			t.Fatalf("release of draining partition %d: %v", o.Partition, err)
		}
		moved[o.Partition] = value
		// Taken by b, with a's checkpoint.
		waitOwned(t, b, o.Partition, func(p api.OwnedPartition) bool {
			return p.Checkpoint != nil && p.Checkpoint.Value == value && p.FencingToken > o.FencingToken
		})
	}
	took := g.waitFair("join 1→2, each partition released by the app", start)
	if took > drainTimeout/2 {
		t.Errorf("the app-released handover took %v, want far less than the drain timeout %v", took, drainTimeout)
	}
	for _, c := range []*candidate{a, b} {
		s, err := c.partitions()
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range s.Owned {
			if o.Draining {
				t.Errorf("%s: partition %d still draining at the fair share", c.name, o.Partition)
			}
		}
	}
}

// TestPartitionsDrainTimeout: an app that never releases its draining
// partitions keeps them until the drain deadline, and not after: the
// sidecar then hands them over itself, all the surplus at once, so that the
// rebalance waits for one drain timeout, not one per partition.
func TestPartitionsDrainTimeout(t *testing.T) {
	t.Parallel()
	const drainTimeout = 2 * time.Second
	g := newPartitionGroup(t, candidateOptions{extraArgs: []string{fmt.Sprintf("--drain-timeout=%v", drainTimeout)}})
	a := g.join(1)[0]
	g.waitFair("one member", time.Now())

	start := time.Now()
	b := g.join(1)[0]
	o := waitDraining(t, a, drainTimeout)
	// Owned by a, renewed, until its deadline; then b's.
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, drainTimeout+settleBound, true, func(context.Context) (bool, error) {
		s, err := a.partitions()
		if err != nil {
			return false, nil
		}
		for _, p := range s.Owned {
			if p.Partition == o.Partition {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s still owns draining partition %d long after its deadline %v", a.name, o.Partition, o.DrainDeadline)
	}
	if early := time.Until(o.DrainDeadline.Time); early > pollInterval {
		t.Errorf("draining partition %d released %v before its deadline", o.Partition, early)
	}
	waitOwned(t, b, o.Partition, func(p api.OwnedPartition) bool { return p.FencingToken > o.FencingToken })
	// The whole surplus drained together: fair soon after the deadline.
	took := g.waitFair(fmt.Sprintf("join 1→2 with a %v drain timeout and no app release", drainTimeout), start)
	if deadline := o.DrainDeadline.Sub(start); took > deadline+settleBound/2 {
		t.Errorf("fair after %v, want soon after the drain deadline (%v after the join): the surplus must drain together", took, deadline)
	}
}

// waitDraining waits until c shows a draining partition, and returns it.
func waitDraining(t *testing.T, c *candidate, within time.Duration) api.OwnedPartition {
	t.Helper()
	var found api.OwnedPartition
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, settleBound+within, true, func(context.Context) (bool, error) {
		s, err := c.partitions()
		if err != nil {
			return false, nil
		}
		for _, o := range s.Owned {
			if o.Draining {
				found = o
				return !o.DrainDeadline.IsZero(), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s shows no draining partition: %v", c.name, err)
	}
	return found
}

// waitOwned waits until c owns partition i with cond true.
func waitOwned(t *testing.T, c *candidate, i int, cond func(api.OwnedPartition) bool) {
	t.Helper()
	var last api.Partitions
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, settleBound, true, func(context.Context) (bool, error) {
		s, err := c.partitions()
		if err != nil {
			return false, nil
		}
		last = s
		for _, o := range s.Owned {
			if o.Partition == i {
				return cond(o), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s does not own partition %d as expected: %+v", c.name, i, last.Owned)
	}
}

// drainingEvents follows c's GET /events until the test ends and sends the
// data of each event that shows a draining partition.
func drainingEvents(t *testing.T, c *candidate) <-chan string {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.apiURL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	out := make(chan string, 100)
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var s api.Partitions
			if json.Unmarshal([]byte(data), &s) != nil {
				continue
			}
			for _, o := range s.Owned {
				if o.Draining {
					select {
					case out <- data:
					default:
					}
					break
				}
			}
		}
	}()
	return out
}
