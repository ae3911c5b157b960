//go:build integration

package e2e

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/routing"
)

// The tests here plant, on the routing objects, fencing tokens that no term
// of the Lease wrote, and check that the leader overwrites them: one write
// with a stolen token, or a token from before the Lease's tokens went back
// (the recovery from int32 exhaustion, docs/safety.md), used to pin the
// routing for every later leader.

const (
	// beyondTheLease is above every token a Lease (int32) can carry; the
	// label policy of the time admitted it (^[0-9]{1,19}$). The shipped
	// policies refuse it from the sidecar's token now, so the tests write
	// it as the admin.
	beyondTheLease = "9000000000000000000"
	// highestInt32 is the highest token the policies admit from the
	// sidecar's token, far above the Lease's: what a stolen token can
	// still write.
	highestInt32 = "2147483647"
	// plantedAddress is where the planted slice routes the Service.
	plantedAddress = "10.9.9.9"
)

// repairBound is how long after a planting write the leader has repaired
// it: its next routing check (once per lease duration, the Resync of
// options' routingConfig), plus that check's requests, each bounded by the
// client's timeout of half the renew deadline (the slice and the Service,
// then the Lease and the write), plus one retry, after at most a retry
// period, of a write that raced the planting one.
const repairBound = leaseDuration + renewDeadline + retryPeriod

// plantSlice writes token and plantedAddress on the slice with client, as
// a writer outside every term, and returns when, once m's watch has seen
// it (waitSlice looks at the last version seen: before that, it would find
// the leader's version from before the planting).
func plantSlice(t *testing.T, m *sliceMonitor, client kubernetes.Interface, namespace, name, token string) time.Time {
	t.Helper()
	ctx := context.Background()
	m.plant(token)
	api := client.DiscoveryV1().EndpointSlices(namespace)
	s, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations[routing.FencingTokenAnnotation] = token
	s.Annotations[routing.HolderAnnotation] = "attacker"
	s.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{plantedAddress}}}
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("planting fencing token %s on the slice: %v", token, err)
	}
	planted := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return slices.ContainsFunc(m.versions(), func(v sliceVersion) bool { return v.token == token }), nil
	}); err != nil {
		t.Fatalf("the watch did not deliver the slice planted with %s", token)
	}
	return planted
}

// plantPod writes token as pod's fencing token with client and returns
// when.
func plantPod(t *testing.T, client kubernetes.Interface, namespace, pod, token string) time.Time {
	t.Helper()
	patch := mergePatch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{routing.FencingTokenAnnotation: token}}})
	if _, err := client.CoreV1().Pods(namespace).Patch(context.Background(), pod, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("planting fencing token %s on pod %s: %v", token, pod, err)
	}
	return time.Now()
}

// waitPodTokens waits until each pod carries its fencing token, and
// returns when it saw them.
func waitPodTokens(t *testing.T, namespace string, want map[string]int64, timeout time.Duration) time.Time {
	t.Helper()
	got := map[string]string{}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for name, token := range want {
			p, err := controlPlane.AdminClient().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got[name] = p.Annotations[routing.FencingTokenAnnotation]
			if got[name] != strconv.FormatInt(token, 10) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the pods carry fencing tokens %v after %v, want %v", got, timeout, want)
	}
	return time.Now()
}

// overridden is c's leader_elector_route_overridden_total of reason.
func overridden(t *testing.T, c *candidate, reason string) float64 {
	t.Helper()
	for _, l := range strings.Split(routeMetrics(t, c), "; ") {
		if strings.HasPrefix(l, "leader_elector_route_overridden_total{") && strings.Contains(l, `reason="`+reason+`"`) {
			v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", c.name, l, err)
			}
			return v
		}
	}
	t.Fatalf("%s exports no leader_elector_route_overridden_total{reason=%q}: %s", c.name, reason, routeMetrics(t, c))
	return 0
}

// TestRouteEndpointSliceForeignToken: the slice is planted with
// 9000000000000000000 and another address; the leader routes the Service
// back to itself by its next check. Then the leader is killed and the slice
// planted with 2147483647 with the sidecar's own token (a stolen one): the
// next leader routes the Service to itself when it takes over. Each
// overwrite is counted by reason.
func TestRouteEndpointSliceForeignToken(t *testing.T) {
	t.Parallel()
	const namespace = "route-endpointslice-foreign"
	spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slice := watchSlice(t, namespace, lease)
	g := routedGroup(t, spec, namespace, lease, kubeconfig, "pod-a", "pod-b")
	first := g.WaitLeader(giveUp)
	firstToken := tokenOf(t, first)
	slice.waitSlice(first, firstToken, giveUp)

	planted := plantSlice(t, slice, controlPlane.AdminClient(), namespace, lease, beyondTheLease)
	repaired := slice.waitSlice(first, firstToken, repairBound)
	t.Logf("MEASURED slice planted with %s repaired by the leader %v after the planting (bound %v)", beyondTheLease, repaired.Sub(planted).Round(time.Millisecond), repairBound)
	if n := overridden(t, first, "malformed"); n < 1 {
		t.Errorf("%s: overridden{malformed} = %v, want at least 1", first.name, n)
	}

	first.signal(syscall.SIGKILL)
	if _, err := first.waitExit(giveUp); err != nil {
		t.Fatal(err)
	}
	planted = plantSlice(t, slice, tokenClient(t, kubeconfig), namespace, lease, highestInt32)
	next := g.WaitLeader(takeoverBound, first)
	repaired = slice.waitSlice(next, tokenOf(t, next), repairBound)
	t.Logf("MEASURED slice planted with %s (the sidecar's token) while no pod led: the next leader routes to itself %v after the planting", highestInt32, repaired.Sub(planted).Round(time.Millisecond))
	if n := overridden(t, next, "above_lease"); n < 1 {
		t.Errorf("%s: overridden{above_lease} = %v, want at least 1", next.name, n)
	}
	noneRefused(t, g)
}

// TestRouteLabelForeignToken: label mode. The leader's own pod is planted
// with 9000000000000000000 (as the admin) and the follower's with
// 2147483647 (with the sidecar's token): the leader's next check writes its
// token over both. Then the leader's pod is planted again and the leader
// killed: the next leader fences that pod, clearing its label, and labels
// itself. Over the run no two pods carry the label "true" at once.
func TestRouteLabelForeignToken(t *testing.T) {
	t.Parallel()
	const namespace = "route-label-foreign"
	spec, podLabels, kubeconfig, lease := routedExample(t, "example-label", namespace)
	pods := []string{"pod-a", "pod-b"}
	createPods(t, namespace, spec, podLabels, pods...)
	labels := watchLabels(t, namespace)
	g := routedGroup(t, spec, namespace, lease, kubeconfig, pods...)
	first := g.WaitLeader(giveUp)
	labels.waitLabelled(first, giveUp)
	firstToken := tokenOf(t, first)
	follower := pods[0]
	if follower == first.name {
		follower = pods[1]
	}
	waitPodTokens(t, namespace, map[string]int64{first.name: firstToken, follower: firstToken}, giveUp)

	planted := plantPod(t, controlPlane.AdminClient(), namespace, first.name, beyondTheLease)
	plantPod(t, tokenClient(t, kubeconfig), namespace, follower, highestInt32)
	repaired := waitPodTokens(t, namespace, map[string]int64{first.name: firstToken, follower: firstToken}, repairBound)
	t.Logf("MEASURED pods planted with %s and %s repaired by the leader %v after the planting (bound %v)", beyondTheLease, highestInt32, repaired.Sub(planted).Round(time.Millisecond), repairBound)
	for _, reason := range []string{"malformed", "above_lease"} {
		if n := overridden(t, first, reason); n < 1 {
			t.Errorf("%s: overridden{%s} = %v, want at least 1", first.name, reason, n)
		}
	}

	plantPod(t, controlPlane.AdminClient(), namespace, first.name, beyondTheLease)
	first.signal(syscall.SIGKILL)
	killed := time.Now()
	next := g.WaitLeader(takeoverBound, first)
	at := labels.waitLabelled(next, repairBound)
	t.Logf("MEASURED label: the old leader's pod planted with %s and killed; only the next leader labelled %v after the kill", beyondTheLease, at.Sub(killed).Round(time.Millisecond))
	checkPodLabels(t, namespace, lease, next.name, pods)
	if n := overridden(t, next, "malformed"); n < 1 {
		t.Errorf("%s: overridden{malformed} = %v, want at least 1", next.name, n)
	}
	waitPodTokens(t, namespace, map[string]int64{first.name: tokenOf(t, next)}, repairBound)
	noneRefused(t, g)
}
