package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// fanoutWrites is how many writes of the Lease the fan-out phase makes,
// fanoutSpacing the time between two: longer than one write takes to reach
// 200 watchers on a 2-core machine (up to about 150 ms in one-off runs,
// read from the sidecars' logs), so that the writes do not pile up.
const (
	fanoutWrites  = 20
	fanoutSpacing = 300 * time.Millisecond
)

// fanoutAnnotation is the annotation the fan-out phase writes: a change of
// the Lease that is no renewal and no change of holder, which every
// watching candidate receives and looks at all the same.
const fanoutAnnotation = "bench.leader-elector.io/fanout"

// fanoutResult is what one write of the Lease costs the group's processes.
type fanoutResult struct {
	// perWrite is the CPU time (utime+stime) of every candidate together
	// per write, less what the group spends idle over the same time.
	perWrite time.Duration
}

// fanout measures what one write of the Lease costs the idle group: a
// candidate that watches the Lease (leader-elector) wakes for every write
// and reads it, one that polls it (client-go) does not. The bench writes
// an annotation fanoutWrites times, fanoutSpacing apart, and counts the
// group's CPU time above its idle rate (res.idle). On a machine where the
// candidates share the cores, that CPU time is also the least time a write
// takes to reach every watcher; in a cluster the watchers are on many
// nodes and receive a write side by side.
func fanout(ctx context.Context, g *group, res *implResult) error {
	members := append([]*candidate{res.idle.leader}, res.idle.followers...)
	ticks := func() (uint64, error) {
		var sum uint64
		for _, c := range members {
			t, err := cpuTicks(c.Pid())
			if err != nil {
				return 0, err
			}
			sum += t
		}
		return sum, nil
	}
	leases := g.cp.AdminClient().CoordinationV1().Leases(namespace)
	ticks0, err := ticks()
	if err != nil {
		return err
	}
	from := time.Now()
	for i := range fanoutWrites {
		// A merge patch is unconditional, so a renewal in between does not
		// make it fail. A renewal that read the Lease before the patch
		// fails on a conflict and the candidate tries again, well inside
		// the renew deadline.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, fanoutAnnotation, i)
		if _, err := leases.Patch(ctx, g.lease, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("fan-out write %d: %w", i, err)
		}
		if err := pause(ctx, fanoutSpacing); err != nil {
			return err
		}
	}
	elapsed := time.Since(from)
	ticks1, err := ticks()
	if err != nil {
		return err
	}
	// The idle rate, in millicores per candidate, over the same members.
	var idleMillicores float64
	for _, c := range members {
		idleMillicores += res.idle.cpu[c]
	}
	busy := float64(ticks1-ticks0)/clockTicksPerSecond - idleMillicores/1000*elapsed.Seconds()
	res.fanout = fanoutResult{perWrite: time.Duration(max(busy, 0) / fanoutWrites * float64(time.Second))}
	logf("%s fan-out: %d writes of the Lease cost the group %v of CPU each (above its idle rate)", g.im.key, fanoutWrites, res.fanout.perWrite.Round(100*time.Microsecond))
	return nil
}
