//go:build integration

package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/routing"
)

// newTermBound is how long after routing was taken away under the current
// term's token a new term routes again: the leader's next check, its
// requests and one retry (repairBound) find the publication refused under
// that token; the leader then releases the Lease (one write, bounded by
// the client's timeout of half the renew deadline, so within a renew
// deadline), and the other candidate, which follows the Lease's watch,
// takes it over within a retry period and publishes itself at once.
const newTermBound = repairBound + renewDeadline + retryPeriod

// TestRouteEndpointSliceWithdrawnUnderTheToken: with the shipped policy,
// the sidecar's token (a stolen one) empties the slice under the current
// term's token. The policy refuses the leader to publish itself again
// under that token, so the leader ends its term, and a new term, with a
// larger token, routes the Service again within newTermBound. Without
// that, the Service had no endpoint for as long as the leader kept
// renewing.
func TestRouteEndpointSliceWithdrawnUnderTheToken(t *testing.T) {
	t.Parallel()
	const namespace = "route-endpointslice-withdrawn"
	ctx := context.Background()
	spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slice := watchSlice(t, namespace, lease)
	g := routedGroup(t, spec, namespace, lease, kubeconfig, "pod-a", "pod-b")
	first := g.WaitLeader(30 * time.Second)
	firstToken := tokenOf(t, first)
	slice.waitSlice(first, firstToken, 10*time.Second)

	api := tokenClient(t, kubeconfig).DiscoveryV1().EndpointSlices(namespace)
	s, err := api.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints = nil
	if _, err := api.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("emptying the slice under token %d with the sidecar's token: %v", firstToken, err)
	}
	emptied := time.Now()

	var routed sliceVersion
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, newTermBound, true, func(context.Context) (bool, error) {
		vs := slice.versions()
		v := vs[len(vs)-1]
		token, err := strconv.ParseInt(v.token, 10, 64)
		if err != nil || token <= firstToken || len(v.addresses) != 1 || v.addresses[0] != podIP(v.holder) {
			return false, nil
		}
		routed = v
		return true, nil
	}); err != nil {
		vs := slice.versions()
		t.Fatalf("no new term routes the Service within %v after its slice was emptied under token %d; last versions: %+v\n%s: %s", newTermBound, firstToken, vs[max(0, len(vs)-3):], first.name, first.log())
	}
	t.Logf("MEASURED slice emptied under token %d: %s routes again with token %s %v later (bound %v)", firstToken, routed.holder, routed.token, routed.at.Sub(emptied).Round(time.Millisecond), newTermBound)
	if got := first.log(); !strings.Contains(got, "Ending this term so that a new one") {
		t.Errorf("%s did not say why it ended its term:\n%s", first.name, got)
	}
}

// TestRouteLabelWithdrawnUnderTheToken: label mode. The sidecar's token (a
// stolen one) sets the leader's label "false", keeping its token; the
// policy refuses the leader to label itself again under it, so it ends its
// term, and the next term labels its pod, with a larger token, within
// newTermBound.
func TestRouteLabelWithdrawnUnderTheToken(t *testing.T) {
	t.Parallel()
	const namespace = "route-label-withdrawn"
	ctx := context.Background()
	spec, podLabels, kubeconfig, lease := routedExample(t, "example-label", namespace)
	pods := []string{"pod-a", "pod-b"}
	createPods(t, namespace, spec, podLabels, pods...)
	labels := watchLabels(t, namespace)
	g := routedGroup(t, spec, namespace, lease, kubeconfig, pods...)
	first := g.WaitLeader(30 * time.Second)
	labels.waitLabelled(first, 10*time.Second)
	firstToken := tokenOf(t, first)

	unlabel := mergePatch(t, map[string]any{"metadata": map[string]any{"labels": map[string]string{routing.DefaultLeaderLabel: "false"}}})
	if _, err := tokenClient(t, kubeconfig).CoreV1().Pods(namespace).Patch(ctx, first.name, types.MergePatchType, unlabel, metav1.PatchOptions{}); err != nil {
		t.Fatalf("unlabelling %s under token %d with the sidecar's token: %v", first.name, firstToken, err)
	}
	unlabelled := time.Now()

	var leader string
	var token int64
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, newTermBound, true, func(ctx context.Context) (bool, error) {
		for _, name := range pods {
			p, err := controlPlane.AdminClient().CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			token, err = strconv.ParseInt(p.Annotations[routing.FencingTokenAnnotation], 10, 64)
			if err == nil && token > firstToken && p.Labels[routing.DefaultLeaderLabel] == "true" {
				leader = name
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no pod labelled leader by a new term within %v after %s was unlabelled under token %d\n%s: %s", newTermBound, first.name, firstToken, first.name, first.log())
	}
	t.Logf("MEASURED %s unlabelled under token %d: %s labelled leader with token %d %v later (bound %v)", first.name, firstToken, leader, token, time.Since(unlabelled).Round(time.Millisecond), newTermBound)
	checkPodLabels(t, namespace, lease, leader, pods)
	if got := first.log(); !strings.Contains(got, "Ending this term so that a new one") {
		t.Errorf("%s did not say why it ended its term:\n%s", first.name, got)
	}
}
