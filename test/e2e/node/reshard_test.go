//go:build integration

package node_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/invariant"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestChartPartitionsReshard changes a partition group's count from 16 to 8
// the way users do: a new chart value, applied, rolled out by the
// Deployment controller one pod at a time (maxSurge 1, maxUnavailable 0), so
// for a while pods at 16 and at 8 run in one group. The old pods give up
// partitions 8..15 and share 0..7 with the new ones; every sidecar's GET
// /partitions is checked throughout: no partition claimed by two pods at
// once, no token going back (docs/partitions.md, "Changing the partition
// count"). What it does not show: that a new pod's readiness waited for its
// share — a pod is also ready during the settling grace after the members
// change, which covers these quick starts.
func TestChartPartitionsReshard(t *testing.T) {
	values := []string{"demo.replicas=3",
		"election.leaseDurationSeconds=4", "election.renewDeadlineSeconds=2", "election.retryPeriodSeconds=1",
		"partitions.drainTimeoutSeconds=0",
		"demo.strategy.type=RollingUpdate", "demo.strategy.rollingUpdate.maxSurge=1", "demo.strategy.rollingUpdate.maxUnavailable=0"}
	d := deployChart(t, append(values, "partitions.count=16")...)
	ctx := context.Background()
	settle := func(n int, from time.Time, timeout time.Duration) time.Duration {
		t.Helper()
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			ok, err := d.partitionsSettled(ctx, n)
			lastErr = err
			return ok, nil
		})
		if err != nil {
			t.Fatalf("partitions 0..%d not owned fairly by live members, and nothing above, within %v (last error: %v)", n-1, timeout, lastErr)
		}
		return time.Since(from)
	}
	settle(16, time.Now(), 2*time.Minute)

	r, stopPolling := pollClaims(t, d)
	// Before the change: the pollers have seen every partition owned.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeGiveUp, true, func(context.Context) (bool, error) {
		rep := r.parts.Check(16)
		return rep.Claims > 0 && len(rep.Violations) == 0, nil
	}); err != nil {
		t.Fatalf("the claim pollers did not see all 16 partitions owned within 30 s: %v", r.parts.Check(16).Violations)
	}

	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), "demo", d.namespace, chartDemoArgs(append(values, "partitions.count=8"))...)
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, d.namespace); err != nil {
		t.Fatal(err)
	}
	applied := time.Now()
	if err := packaging.Apply(ctx, theNode.ControlPlane().AdminConfig(), objs); err != nil {
		t.Fatal(err)
	}
	// The rollout: every pod replaced, each new one ready before the next
	// old one goes (maxUnavailable 0). It finishes only if the new pods,
	// at 8, own their share beside the old ones, at 16.
	var rolledOut time.Duration
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		dep, err := d.client.AppsV1().Deployments(d.namespace).Get(ctx, d.deployment, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		s := dep.Status
		done := s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == 3 && s.Replicas == 3 && s.AvailableReplicas == 3
		if done {
			rolledOut = time.Since(applied)
		}
		return done, nil
	})
	if err != nil {
		t.Fatalf("the rollout from 16 to 8 partitions did not finish within 4 minutes")
	}
	fair := settle(8, applied, time.Minute)

	// Every sidecar now serves 8 partitions, and the group's N is 8.
	pods, err := d.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		s, err := sidecarPartitions(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if s.Partitions != 8 || s.EffectivePartitions != 8 {
			t.Errorf("%s: partitions %d, effectivePartitions %d, want 8 and 8", p.Name, s.Partitions, s.EffectivePartitions)
		}
	}
	stopPolling()
	rep := r.parts.Check(16)
	for _, v := range rep.Violations {
		t.Errorf("VIOLATION %s", v)
	}
	if rep.Claims == 0 {
		t.Errorf("the claim pollers saw no claim (%d answers): the check could not fail", rep.Observations)
	}
	t.Logf("MEASURED reshard 16 → 8 by a rolling update (3 pods, maxSurge 1, maxUnavailable 0, lease 4 s, drain timeout 0): rollout finished %v after the apply, partitions 0..7 fair among the new pods %v after it; %d claims in %d answers, %d violations",
		rolledOut.Round(100*time.Millisecond), fair.Round(100*time.Millisecond), rep.Claims, rep.Observations, len(rep.Violations))
}

// pollClaims starts the soak's claim pollers on d's pods — one per running
// pod, from inside its network namespace, every pod found as it starts —
// feeding r.parts, the partition checker. stop ends them; the test's end
// does too.
func pollClaims(t *testing.T, d *deployment) (r *soakRun, stop func()) {
	r = &soakRun{d: d, parts: invariant.NewPartitions(), pollers: map[types.UID]*claimPoller{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.trackPods(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		<-done
		for _, p := range r.pollers {
			p.stop()
		}
	})
	t.Cleanup(stop)
	return r, stop
}

// sidecarPartitions asks a pod's sidecar for GET /partitions on its
// localhost, from inside the pod's network namespace.
func sidecarPartitions(ctx context.Context, p *corev1.Pod) (api.Partitions, error) {
	var out api.Partitions
	pid, err := theNode.ContainerPID(ctx, containerIDOf(p, "app"))
	if err != nil {
		return out, fmt.Errorf("%s: %w", p.Name, err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return out, err
	}
	defer func() { _ = ns.Close() }()
	if err := getJSON(ctx, netnsClient(ns, 2*time.Second, false), "/partitions", &out); err != nil {
		return out, fmt.Errorf("%s: %w", p.Name, err)
	}
	return out, nil
}
