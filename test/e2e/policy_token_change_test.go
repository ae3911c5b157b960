//go:build integration

package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/routing"
)

// The tests here check, on the real API server and with the sidecar's
// ServiceAccount, the rule both routing policies add to the token's
// bounds: no change of routing without a change of token. Under the token
// a slice or a pod carries, the endpoints may only be emptied and the
// leader label only set "false" (a withdrawal); publishing anything else
// needs a new token (a new term, or the leader overwriting a token no term
// wrote, which may be lower).

// TestSlicePolicyNoNewEndpointsUnderTheSameToken: with the
// route-endpointslice component's policy, moving the slice's endpoint to
// another address, adding one, or publishing again after a withdrawal,
// all under the token the slice carries, are refused; the withdrawal, a
// port change, a handover with a new token and the overwrite of a token
// no term wrote are allowed.
func TestSlicePolicyNoNewEndpointsUnderTheSameToken(t *testing.T) {
	t.Parallel()
	const namespace = "slice-policy-token-change"
	ctx := context.Background()
	_, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slices := tokenClient(t, kubeconfig).DiscoveryV1().EndpointSlices(namespace)
	shipped, err := slices.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	// from returns base with the token, the holder and one endpoint per
	// address, as the sidecar writes it.
	from := func(base *discoveryv1.EndpointSlice, token, holder string, port int32, addresses ...string) *discoveryv1.EndpointSlice {
		s := base.DeepCopy()
		s.Annotations = map[string]string{routing.FencingTokenAnnotation: token, routing.HolderAnnotation: holder}
		s.Endpoints = nil
		for _, a := range addresses {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}}
		return s
	}
	store := func(what string, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		t.Helper()
		stored, err := slices.Update(ctx, s, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("%s, as the sidecar does: %v", what, err)
		}
		return stored
	}
	waitRefused(t, "publishing an endpoint with token 9e18 (the policy in use)", func() error {
		_, err := slices.Update(ctx, from(shipped, "9000000000000000000", "pod-a", 8081, "10.9.9.9"), dry)
		return err
	})

	// pod-a's term 3 publishes it.
	published := store("publishing pod-a under token 3", from(shipped, "3", "pod-a", 8081, podIP("pod-a")))
	for _, tc := range []struct {
		what  string
		slice *discoveryv1.EndpointSlice
		allow bool
	}{
		{what: "move the endpoint to another address under the same token", slice: from(published, "3", "pod-a", 8081, "10.9.9.9")},
		{what: "move the endpoint to another pod's address under the same token", slice: from(published, "3", "pod-b", 8081, podIP("pod-b"))},
		{what: "add an endpoint under the same token", slice: from(published, "3", "pod-a", 8081, podIP("pod-a"), "10.9.9.9")},
		{what: "follow the Service's port under the same token", slice: from(published, "3", "pod-a", 8082, podIP("pod-a")), allow: true},
		{what: "empty the slice under the same token (withdraw)", slice: from(published, "3", "pod-a", 8081), allow: true},
		{what: "hand over to pod-b with a new token", slice: from(published, "4", "pod-b", 8081, podIP("pod-b")), allow: true},
	} {
		_, err := slices.Update(ctx, tc.slice, dry)
		checkPolicyVerdict(t, tc.what, tc.allow, err)
	}

	// pod-a withdraws under token 3; publishing again needs a new term.
	withdrawn := store("withdrawing pod-a under token 3", from(published, "3", "pod-a", 8081))
	_, err = slices.Update(ctx, from(withdrawn, "3", "pod-a", 8081, podIP("pod-a")), dry)
	checkPolicyVerdict(t, "publish pod-a again under the token it was withdrawn under", false, err)
	_, err = slices.Update(ctx, from(withdrawn, "4", "pod-a", 8081, podIP("pod-a")), dry)
	checkPolicyVerdict(t, "publish pod-a again with its new term's token", true, err)

	// A stolen token's write: another address with a token no term wrote
	// (a changed token, so the policy lets it through); the leader then
	// overwrites it with its own, lower, token.
	planted := store("planting 10.9.9.9 under token 2147483647", from(withdrawn, "2147483647", "thief", 8081, "10.9.9.9"))
	_, err = slices.Update(ctx, from(planted, "3", "pod-a", 8081, podIP("pod-a")), dry)
	checkPolicyVerdict(t, "overwrite a token no term wrote with the leader's lower one", true, err)
	_, err = slices.Update(ctx, from(planted, "2147483647", "thief", 8081, "10.8.8.8"), dry)
	checkPolicyVerdict(t, "move the planted endpoint under the planted token", false, err)
}

// TestLabelPolicyNoLeaderLabelUnderTheSameToken: with the chart's
// label-mode policy, labelling a pod leader under the token it carries is
// refused — a follower fenced by the current leader, a leader that
// stepped down — and allowed with a new token (a handover, the same pod's
// next term, the overwrite of a token no term wrote); stepping down under
// the same token is allowed.
func TestLabelPolicyNoLeaderLabelUnderTheSameToken(t *testing.T) {
	t.Parallel()
	const namespace = "label-policy-token-change"
	ctx := context.Background()
	const sa, lease = "r-leader-elector", "r-leader-elector"
	_, kubeconfig := chartInstall(t, namespace, sa, "--set", "routing.mode=label", "--set", "election.readiness=candidate")
	createPods(t, namespace, minimalPod(sa), map[string]string{"app": "demo"}, "pod-a", "pod-b")
	pods := tokenClient(t, kubeconfig).CoreV1().Pods(namespace)
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	patch := func(leaderLabel, token string) []byte {
		meta := map[string]any{"labels": map[string]any{routing.DefaultLeaderLabel: leaderLabel, routing.GroupLabel: lease}}
		if token != "" {
			meta["annotations"] = map[string]any{routing.FencingTokenAnnotation: token}
		}
		return mergePatch(t, map[string]any{"metadata": meta})
	}
	store := func(what, pod string, body []byte) {
		t.Helper()
		if _, err := pods.Patch(ctx, pod, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s, as the sidecar does: %v", what, err)
		}
	}
	try := func(what, pod string, body []byte, allow bool) {
		t.Helper()
		_, err := pods.Patch(ctx, pod, types.MergePatchType, body, dry)
		checkPolicyVerdict(t, what, allow, err)
	}
	waitRefused(t, "labelling pod-a leader with token 9e18 (the policy in use)", func() error {
		_, err := pods.Patch(ctx, "pod-a", types.MergePatchType, patch("true", "9000000000000000000"), dry)
		return err
	})

	// pod-a's term 3: it fences pod-b with its token, then labels itself.
	store("fencing pod-b with token 3", "pod-b", patch("false", "3"))
	store("labelling pod-a leader under token 3", "pod-a", patch("true", "3"))
	try("label pod-b leader under the token pod-a fenced it with", "pod-b", patch("true", ""), false)
	try("label pod-b leader, writing that same token", "pod-b", patch("true", "3"), false)
	try("hand over: label pod-b leader with a new token", "pod-b", patch("true", "4"), true)
	try("renew: pod-a stays leader under its token", "pod-a", patch("true", "3"), true)

	// pod-a steps down under token 3; labelling it again needs a new term.
	store("pod-a stepping down under token 3", "pod-a", patch("false", ""))
	try("label pod-a leader again under the token it stepped down under", "pod-a", patch("true", ""), false)
	try("label pod-a leader with its new term's token", "pod-a", patch("true", "4"), true)

	// A token no term wrote, on pod-a: the leader (pod-a again, term 4)
	// overwrites it with its lower one.
	store("planting token 2147483647 on pod-a", "pod-a", patch("false", "2147483647"))
	try("label pod-a leader, overwriting a token no term wrote with a lower one", "pod-a", patch("true", "4"), true)
	try("label pod-a leader under the planted token", "pod-a", patch("true", ""), false)
}
