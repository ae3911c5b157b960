//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/routing"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// The tests here run sidecars configured exactly as manifests/example-
// endpointslice and example-label configure them, with the example's
// ServiceAccount token (so with the shipped per-mode RBAC), and watch what
// they write: the EndpointSlice of the selector-less Service, or the
// leader label on the pods. There is no kubelet or kube-proxy: what the
// writes do to traffic is the real-node tests' part.

// routedGroup starts one sidecar per pod name from the template.
func routedGroup(t *testing.T, spec *corev1.PodSpec, namespace, lease, kubeconfig string, pods ...string) *group {
	t.Helper()
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for _, p := range pods {
		g.Add(routedCandidate(t, spec, p, namespace, kubeconfig))
	}
	return g
}

// routedCandidate runs a sidecar from the template with the e2e timings.
func routedCandidate(t *testing.T, spec *corev1.PodSpec, pod, namespace, kubeconfig string) *candidate {
	t.Helper()
	return fromPodTemplate(t, spec, pod, namespace, kubeconfig,
		"--lease-duration="+leaseDuration.String(), "--renew-deadline="+renewDeadline.String(), "--retry-period="+retryPeriod.String())
}

func noneRefused(t *testing.T, g *group) {
	t.Helper()
	for _, c := range g.Members() {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something with the shipped RBAC:\n%s", c.name, c.log())
		}
	}
}

func tokenOf(t *testing.T, c *candidate) int64 {
	t.Helper()
	s, err := c.state()
	if err != nil || !s.IsLeader {
		t.Fatalf("%s: %+v, %v; want it to lead", c.name, s, err)
	}
	return s.FencingToken
}

// TestRouteEndpointSlice: the leader's EndpointSlice lists the leader
// alone, with its fencing token; after a crash the next leader replaces it
// once the Lease expires; on a release or a graceful stop the old leader
// withdraws and the new one replaces the slice in one write. Every version of the
// slice over the run lists at most one pod, always its writer, with a
// token that never goes back.
func TestRouteEndpointSlice(t *testing.T) {
	t.Parallel()
	const namespace = "route-endpointslice"
	spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slice := watchSlice(t, namespace, lease)
	// Four: one is killed, one releases (and sits out a lease duration),
	// one stops, one is left to lead.
	g := routedGroup(t, spec, namespace, lease, kubeconfig, "pod-a", "pod-b", "pod-c", "pod-d")

	first := g.WaitLeader(giveUp)
	slice.waitSlice(first, tokenOf(t, first), giveUp)
	for _, c := range g.Members() {
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			code, _, err := c.probe("/readyz")
			return err == nil && code == http.StatusOK, nil
		})
		if err != nil {
			t.Errorf("%s is not Ready: every candidate must be Ready in a routing mode", c.name)
		}
	}

	// Crash: SIGKILL → the Lease expires → the next leader replaces the slice.
	kill := time.Now()
	first.signal(syscall.SIGKILL)
	second := g.WaitLeader(takeoverBound, first)
	published := slice.waitSlice(second, tokenOf(t, second), giveUp)
	t.Logf("MEASURED endpointslice crash failover: slice lists the new leader %v after SIGKILL (lease duration %v)", published.Sub(kill).Round(time.Millisecond), leaseDuration)

	// POST /release (what the examples' apps do on SIGTERM): the leader
	// withdraws and releases, the next leader publishes.
	release := time.Now()
	if code, _, body, err := second.do("POST", "/release", nil); err != nil || code != http.StatusOK {
		t.Fatalf("POST /release: %d %s %v", code, body, err)
	}
	third := g.WaitLeader(handoverBound, first, second)
	published = slice.waitSlice(third, tokenOf(t, third), giveUp)
	t.Logf("MEASURED endpointslice handover on POST /release: slice lists the new leader %v after the request; no endpoint listed for %v",
		published.Sub(release).Round(time.Millisecond), noEndpointGap(slice.versions(), release).Round(time.Millisecond))

	// Graceful: SIGTERM → withdraw and release → the next leader publishes.
	term := time.Now()
	third.signal(syscall.SIGTERM)
	if code, err := third.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	fourth := g.WaitLeader(handoverBound, first, second, third)
	published = slice.waitSlice(fourth, tokenOf(t, fourth), giveUp)
	t.Logf("MEASURED endpointslice graceful handover: slice lists the new leader %v after SIGTERM; no endpoint listed for %v",
		published.Sub(term).Round(time.Millisecond), noEndpointGap(slice.versions(), term).Round(time.Millisecond))
	noneRefused(t, g)
}

// noEndpointGap is how long after since the slice listed no address before
// it listed one again.
func noEndpointGap(vs []sliceVersion, since time.Time) time.Duration {
	var emptySince time.Time
	for _, v := range vs {
		if v.at.Before(since) {
			continue
		}
		switch {
		case len(v.addresses) == 0 && emptySince.IsZero():
			emptySince = v.at
		case len(v.addresses) > 0 && !emptySince.IsZero():
			return v.at.Sub(emptySince)
		}
	}
	return 0
}

// TestRouteEndpointSliceFencing: the leader is frozen (SIGSTOP) while its
// slice write is on the way — a proxy between it and the API server holds
// the write — a new leader takes over and writes the slice, and then the
// old write is sent. The API server refuses it (its resourceVersion
// precondition is stale), the slice keeps the newer term's token and
// address, and the old leader, resumed, does not write again.
func TestRouteEndpointSliceFencing(t *testing.T) {
	t.Parallel()
	const namespace = "route-endpointslice-fencing"
	ctx := context.Background()
	spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slice := watchSlice(t, namespace, lease)
	proxy, proxied := startHoldingProxy(t, kubeconfig, sliceWrites)

	g := routedGroup(t, spec, namespace, lease, proxied, "pod-a")
	old := g.WaitLeader(giveUp)
	oldToken := tokenOf(t, old)
	slice.waitSlice(old, oldToken, giveUp)
	next := routedCandidate(t, spec, "pod-b", namespace, kubeconfig)
	g.Add(next)
	harnesstest.WaitFollowing(t, next, old)

	// Something else empties the slice; the leader's next check rewrites
	// it, and that write is held on the way.
	proxy.setHolding(true)
	slices := controlPlane.AdminClient().DiscoveryV1().EndpointSlices(namespace)
	s, err := slices.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints = nil
	if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	resume := freezeWithWriteHeld(t, proxy, old)

	g.WaitLeader(takeoverBound, old)
	newToken := tokenOf(t, next)
	if newToken <= oldToken {
		t.Fatalf("new term's token %d is not above the old %d", newToken, oldToken)
	}
	slice.waitSlice(next, newToken, giveUp)

	deliverLate(t, proxy)
	resume()

	// The resumed old leader learns it no longer leads and leaves the
	// slice alone.
	resumed := time.Now()
	afterResume(t, old, next, func() string {
		vs := slice.versions()
		if last := vs[len(vs)-1]; last.holder != next.name || last.token != strconv.FormatInt(newToken, 10) {
			return fmt.Sprintf("the slice changed to %+v", last)
		}
		return ""
	})
	t.Logf("after resuming, the old leader wrote nothing for %v; its routing metrics: %s", time.Since(resumed).Round(time.Millisecond), routeMetrics(t, old))
	noneRefused(t, g)
}

// freezeWithWriteHeld waits until the proxy holds a routing write of old
// (its check repairs what the test changed within its resync period, a
// lease duration), then freezes old and returns what resumes it (also done
// when the test ends).
func freezeWithWriteHeld(t *testing.T, proxy *holdingProxy, old *candidate) (resume func()) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return proxy.heldCount() > 0, nil
	}); err != nil {
		t.Fatalf("%s sent no routing write within its resync period (%v)", old.name, leaseDuration)
	}
	old.signal(syscall.SIGSTOP)
	var once sync.Once
	resume = func() { once.Do(func() { old.signal(syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// deliverLate sends the held writes now, after a new leader's, and expects
// the API server to refuse each on its stale resourceVersion.
func deliverLate(t *testing.T, proxy *holdingProxy) {
	t.Helper()
	for _, code := range proxy.release() {
		if code != http.StatusConflict {
			t.Errorf("the old leader's late routing write got %d, want 409 Conflict (stale resourceVersion)", code)
		}
	}
}

// afterResume waits until the resumed old leader follows next, then checks
// stable (a problem, or "") for longer than the old leader's resync period:
// whatever the old leader still had in mind, it must not write.
func afterResume(t *testing.T, old, next *candidate, stable func() string) {
	t.Helper()
	ctx := context.Background()
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		st, err := old.state()
		return err == nil && !st.IsLeader && st.Holder == next.name, nil
	}); err != nil {
		t.Fatalf("the resumed old leader does not follow %s", next.name)
	}
	observe := leaseDuration + 2*retryPeriod
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, observe, true, func(context.Context) (bool, error) {
		if problem := stable(); problem != "" {
			t.Errorf("after %s resumed, %s", old.name, problem)
			return true, nil
		}
		return false, nil
	})
	if err != nil && !wait.Interrupted(err) {
		t.Fatal(err)
	}
}

// routeMetrics returns the routing counters of c's /metrics.
func routeMetrics(t *testing.T, c *candidate) string {
	t.Helper()
	_, body, err := c.probe("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "leader_elector_route_") {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}

// TestRouteLabel: exactly the leader's pod carries the leader label; on a
// graceful handover the old leader clears its own label and the new one
// sets its; after a crash the new leader also clears the label the dead
// leader left. Over the whole run no two pods carry "true" at once.
func TestRouteLabel(t *testing.T) {
	t.Parallel()
	const namespace = "route-label"
	spec, podLabels, kubeconfig, lease := routedExample(t, "example-label", namespace)
	pods := []string{"pod-a", "pod-b", "pod-c"}
	createPods(t, namespace, spec, podLabels, pods...)
	labels := watchLabels(t, namespace)
	g := routedGroup(t, spec, namespace, lease, kubeconfig, pods...)

	first := g.WaitLeader(giveUp)
	labels.waitLabelled(first, giveUp)
	checkPodLabels(t, namespace, lease, first.name, pods)

	term := time.Now()
	first.signal(syscall.SIGTERM)
	if code, err := first.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	second := g.WaitLeader(handoverBound, first)
	at := labels.waitLabelled(second, giveUp)
	t.Logf("MEASURED label graceful handover: only the new leader labelled %v after SIGTERM", at.Sub(term).Round(time.Millisecond))

	kill := time.Now()
	second.signal(syscall.SIGKILL)
	third := g.WaitLeader(takeoverBound, first, second)
	at = labels.waitLabelled(third, giveUp)
	t.Logf("MEASURED label crash failover: only the new leader labelled %v after SIGKILL (lease duration %v)", at.Sub(kill).Round(time.Millisecond), leaseDuration)
	checkPodLabels(t, namespace, lease, third.name, pods)
	noneRefused(t, g)
}

// checkPodLabels: every pod names its Lease, and only leader says "true".
func checkPodLabels(t *testing.T, namespace, lease, leader string, pods []string) {
	t.Helper()
	for _, name := range pods {
		p, err := controlPlane.AdminClient().CoreV1().Pods(namespace).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := "false"
		if name == leader {
			want = "true"
		}
		if got := p.Labels[routing.DefaultLeaderLabel]; got != want && !(got == "" && want == "false") {
			t.Errorf("pod %s: %s=%q, want %q", name, routing.DefaultLeaderLabel, got, want)
		}
		if name == leader && p.Labels[routing.GroupLabel] != lease {
			t.Errorf("pod %s: %s=%q, want %q", name, routing.GroupLabel, p.Labels[routing.GroupLabel], lease)
		}
	}
}

// TestRouteLabelFencing: the leader is frozen (SIGSTOP) while its patch
// labelling itself "true" is on the way — a proxy holds it — a new leader
// takes over, fences the old leader's pod (its token on it, label "false")
// and labels itself; then the old patch is sent. The API server refuses it
// (the fencing write changed the pod's resourceVersion), and the resumed
// old leader does not label itself again. No two pods carry "true" at
// once.
func TestRouteLabelFencing(t *testing.T) {
	t.Parallel()
	const namespace = "route-label-fencing"
	ctx := context.Background()
	spec, podLabels, kubeconfig, lease := routedExample(t, "example-label", namespace)
	pods := []string{"pod-a", "pod-b"}
	createPods(t, namespace, spec, podLabels, pods...)
	labels := watchLabels(t, namespace)
	proxy, proxied := startHoldingProxy(t, kubeconfig, podPatches("pod-a"))

	g := routedGroup(t, spec, namespace, lease, proxied, "pod-a")
	old := g.WaitLeader(giveUp)
	labels.waitLabelled(old, giveUp)
	next := routedCandidate(t, spec, "pod-b", namespace, kubeconfig)
	g.Add(next)
	harnesstest.WaitFollowing(t, next, old)

	// Something else clears the leader's label; its next check labels it
	// again, and that patch is held on the way.
	proxy.setHolding(true)
	patch := []byte(`{"metadata":{"labels":{"` + routing.DefaultLeaderLabel + `":"false"}}}`)
	if _, err := controlPlane.AdminClient().CoreV1().Pods(namespace).Patch(ctx, old.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	resume := freezeWithWriteHeld(t, proxy, old)
	g.WaitLeader(takeoverBound, old)
	labels.waitLabelled(next, giveUp)

	deliverLate(t, proxy)
	resume()

	afterResume(t, old, next, func() string {
		hs := labels.states()
		if last := hs[len(hs)-1]; len(last.leaders) != 1 || last.leaders[0] != next.name {
			return fmt.Sprintf("the pods labelled leader are %v", last.leaders)
		}
		return ""
	})
	checkPodLabels(t, namespace, lease, next.name, pods)
	t.Logf("the old leader's routing metrics after resuming: %s", routeMetrics(t, old))
	noneRefused(t, g)
}

// TestRouteRBAC: with each routing example's RBAC the ServiceAccount may do
// exactly what its mode needs and nothing more (asked of the API server's
// authorizer); the elections above prove it is enough. What the admission
// policies further refuse is TestRouteLabelAdmissionPolicy's and
// TestRouteEndpointSliceAdmission's.
func TestRouteRBAC(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dir       string
		namespace string
		extra     func(ns, lease string) []access
	}{
		{"example-endpointslice", "route-rbac-endpointslice", func(ns, lease string) []access {
			// No create: the slice is shipped, and a token that may create
			// EndpointSlices may publish any Service's endpoints.
			return []access{
				{ns, "", "services", lease, "get"},
				{ns, "discovery.k8s.io", "endpointslices", lease, "get"},
				{ns, "discovery.k8s.io", "endpointslices", lease, "update"},
			}
		}},
		{"example-label", "route-rbac-label", func(ns, lease string) []access {
			var out []access
			for _, name := range []string{"", lease, "another"} {
				for _, verb := range []string{"get", "list", "patch"} {
					out = append(out, access{ns, "", "pods", name, verb})
				}
			}
			return out
		}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			_, _, kubeconfig, lease := routedExample(t, tc.dir, tc.namespace)
			want := append([]access{
				{tc.namespace, "coordination.k8s.io", "leases", lease, "get"},
				{tc.namespace, "coordination.k8s.io", "leases", lease, "list"},
				{tc.namespace, "coordination.k8s.io", "leases", lease, "watch"},
				{tc.namespace, "coordination.k8s.io", "leases", lease, "update"},
			}, tc.extra(tc.namespace, lease)...)
			got, _ := allowedAccess(t, kubeconfig, []string{tc.namespace, "default"}, []groupResource{
				{"coordination.k8s.io", "leases"}, {"", "pods"}, {"", "services"}, {"", "secrets"}, {"", "endpoints"}, {"discovery.k8s.io", "endpointslices"},
				{"apps", "deployments"}, {"apps", "replicasets"},
			}, []string{"", lease, "another"})
			slices.SortFunc(want, compareAccess)
			slices.SortFunc(got, compareAccess)
			if !slices.Equal(got, want) {
				t.Errorf("the RBAC of %s allows\n%v\nwant exactly\n%v", tc.dir, got, want)
			}
		})
	}
}

func compareAccess(a, b access) int {
	return strings.Compare(strings.Join([]string{a.namespace, a.group, a.resource, a.name, a.verb}, "/"), strings.Join([]string{b.namespace, b.group, b.resource, b.name, b.verb}, "/"))
}
