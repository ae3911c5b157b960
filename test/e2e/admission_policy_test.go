//go:build integration

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/routing"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// The tests here check, on the real API server, that each shipped
// admission policy is written for one install: it holds for the
// ServiceAccount it names whether or not the chart created it, it reaches
// no other namespace (not even while it cannot be evaluated), and it
// bounds the fencing-token annotation.

// chartInstall renders the chart in namespace with set, applies what it
// renders as the admin, and returns the objects and a kubeconfig with the
// token of the ServiceAccount named sa (created if the chart does not).
func chartInstall(t *testing.T, namespace, sa string, set ...string) (packaging.Objects, string) {
	t.Helper()
	ctx := context.Background()
	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), "r", namespace, packaging.WithImage(set...)...)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, sa)
	if err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	return objs, kubeconfig
}

// minimalPod is a pod spec for pods that only exist as API objects, run as
// the ServiceAccount sa (which the API server requires to exist).
func minimalPod(sa string) *corev1.PodSpec {
	return &corev1.PodSpec{
		ServiceAccountName:           sa,
		AutomountServiceAccountToken: ptr.To(false),
		Containers:                   []corev1.Container{{Name: "app", Image: "registry.example.com/app:1"}},
	}
}

// grantPodPatch lets the ServiceAccount namespace/sa get and patch pods in
// another namespace, as the label-mode Role does in its own.
func grantPodPatch(t *testing.T, in, namespace, sa string) {
	t.Helper()
	grantRole(t, in, namespace, sa, "patch-pods", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "patch"}})
}

// grantRole creates the Role name with rule in the namespace in, bound to
// the ServiceAccount namespace/sa.
func grantRole(t *testing.T, in, namespace, sa, name string, rule rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	rbac := controlPlane.AdminClient().RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{rule}}
	if _, err := rbac.Roles(in).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: namespace}},
	}
	if _, err := rbac.RoleBindings(in).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkPolicyVerdict fails the test unless err is what the admission policy
// should answer: nil if allow, else a refusal by a ValidatingAdmissionPolicy.
func checkPolicyVerdict(t *testing.T, what string, allow bool, err error) {
	t.Helper()
	switch {
	case allow && err != nil:
		t.Errorf("%s with the sidecar's token: %v, want allowed", what, err)
	case !allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")):
		t.Errorf("%s with the sidecar's token: %v, want forbidden by the admission policy", what, err)
	default:
		t.Logf("%s: %v", what, err)
	}
}

// TestLabelPolicyForAnExistingServiceAccount: the label-mode policy
// rendered with serviceAccount.create=false names the existing, unlabelled
// ServiceAccount and refuses its token an image change, a fencing token
// outside int32, and a leader label without a token. It matches pods of
// its own namespace only: the same token, allowed to patch pods in
// another namespace, changes an image there, and while the policy cannot
// be evaluated (every evaluation errs, failurePolicy Fail) only that
// token's writes in its own namespace are refused — the admin's, and every
// write in the other namespace, go through.
func TestLabelPolicyForAnExistingServiceAccount(t *testing.T) {
	t.Parallel()
	const namespace, other, sa = "label-policy-existing-sa", "label-policy-elsewhere", "my-sa"
	ctx := context.Background()
	objs, kubeconfig := chartInstall(t, namespace, sa, "--set", "routing.mode=label", "--set", "election.readiness=candidate",
		"--set", "serviceAccount.create=false", "--set", "serviceAccount.name="+sa)
	if n := len(objs.OfKind("ServiceAccount")); n != 0 {
		t.Fatalf("the chart rendered %d ServiceAccounts with serviceAccount.create=false", n)
	}
	admin := controlPlane.AdminClient()
	got, err := admin.CoreV1().ServiceAccounts(namespace).Get(ctx, sa, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Labels) != 0 || len(got.Annotations) != 0 {
		t.Fatalf("ServiceAccount %s carries labels %v, annotations %v: want none (as an existing one)", sa, got.Labels, got.Annotations)
	}
	lease := "r-leader-elector"
	createPods(t, namespace, minimalPod(sa), map[string]string{"app": "demo"}, "pod-a", "pod-b")
	if _, err := controlPlane.ServiceAccountKubeconfig(ctx, other, "someone"); err != nil { // creates the namespace
		t.Fatal(err)
	}
	createPods(t, other, minimalPod("someone"), map[string]string{"app": "demo"}, "pod-x")
	grantPodPatch(t, other, namespace, sa)

	client := tokenClient(t, kubeconfig).CoreV1()
	dry := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	image := []byte(`[{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example.com/evil:1"}]`)
	waitRefused(t, "changing a container's image", func() error {
		_, err := client.Pods(namespace).Patch(ctx, "pod-a", types.JSONPatchType, image, dry)
		return err
	})
	meta := func(labels, annotations map[string]any) []byte {
		m := map[string]any{}
		if labels != nil {
			m["labels"] = labels
		}
		if annotations != nil {
			m["annotations"] = annotations
		}
		return mergePatch(t, map[string]any{"metadata": m})
	}
	leader := map[string]any{routing.DefaultLeaderLabel: "true", routing.GroupLabel: lease}
	follower := map[string]any{routing.DefaultLeaderLabel: "false", routing.GroupLabel: lease}
	token := func(v any) map[string]any { return map[string]any{routing.FencingTokenAnnotation: v} }
	// pod-b joins the group and carries a token, as the sidecar leaves it.
	if _, err := client.Pods(namespace).Patch(ctx, "pod-b", types.MergePatchType, meta(leader, token("7")), metav1.PatchOptions{}); err != nil {
		t.Fatalf("labelling pod-b leader with token 7: %v", err)
	}
	for _, tc := range []struct {
		what  string
		pod   string
		body  []byte
		allow bool
	}{
		{what: "label itself leader with the largest int32 token", pod: "pod-a", body: meta(leader, token("2147483647")), allow: true},
		{what: "join the group without a token", pod: "pod-a", body: meta(follower, nil), allow: true},
		{what: "label itself leader with token 9e18", pod: "pod-a", body: meta(leader, token("9000000000000000000"))},
		{what: "label itself leader with token 2^31", pod: "pod-a", body: meta(leader, token("2147483648"))},
		{what: "label itself leader with a token with a leading zero", pod: "pod-a", body: meta(leader, token("07"))},
		{what: "label itself leader with a negative token", pod: "pod-a", body: meta(leader, token("-1"))},
		{what: "label itself leader without a token", pod: "pod-a", body: meta(leader, nil)},
		{what: "write token 9e18 on a follower", pod: "pod-b", body: meta(follower, token("9000000000000000000"))},
		{what: "remove a pod's token", pod: "pod-b", body: meta(nil, token(nil))},
		{what: "step down, keeping the token", pod: "pod-b", body: meta(follower, nil), allow: true},
	} {
		_, err := client.Pods(namespace).Patch(ctx, tc.pod, types.MergePatchType, tc.body, dry)
		checkPolicyVerdict(t, tc.what, tc.allow, err)
	}

	// Elsewhere the same token is not the policy's business.
	if _, err := client.Pods(other).Patch(ctx, "pod-x", types.JSONPatchType, image, dry); err != nil {
		t.Errorf("changing an image in namespace %s with the same token (granted there): %v, want allowed: the binding matches its own namespace only", other, err)
	}

	// A policy that cannot be evaluated: every evaluation errs (a missing
	// key), and failurePolicy Fail refuses what it matches.
	policies := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	name := "leader-elector-route-label." + namespace + "." + lease
	broken := []byte(`[{"op": "add", "path": "/spec/validations/-", "value": {"expression": "variables.labels['no-such-label'] == 'x'"}}]`)
	if _, err := policies.Patch(ctx, name, types.JSONPatchType, broken, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	join := meta(follower, nil)
	var refused error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		_, refused = client.Pods(namespace).Patch(ctx, "pod-a", types.MergePatchType, join, dry)
		return refused != nil && strings.Contains(refused.Error(), "no such key"), nil
	}); err != nil {
		t.Fatalf("the broken policy never took effect: %v (last: %v)", err, refused)
	}
	t.Logf("the sidecar's own write in %s while the policy cannot be evaluated: %v", namespace, refused)
	for what, call := range map[string]func() error{
		"the admin changing an image in " + namespace: func() error {
			_, err := admin.CoreV1().Pods(namespace).Patch(ctx, "pod-a", types.JSONPatchType, image, dry)
			return err
		},
		"the admin changing an image in " + other: func() error {
			_, err := admin.CoreV1().Pods(other).Patch(ctx, "pod-x", types.JSONPatchType, image, dry)
			return err
		},
		"the admin labelling a pod in " + other: func() error {
			_, err := admin.CoreV1().Pods(other).Patch(ctx, "pod-x", types.MergePatchType, meta(map[string]any{"x": "y"}, nil), metav1.PatchOptions{})
			return err
		},
		"the sidecar's token changing an image in " + other: func() error {
			_, err := client.Pods(other).Patch(ctx, "pod-x", types.JSONPatchType, image, dry)
			return err
		},
	} {
		if err := call(); err != nil {
			t.Errorf("%s while the policy cannot be evaluated: %v, want allowed", what, err)
		}
	}
}

// TestSlicePolicyBoundsTheToken: the endpointslice-mode policy refuses the
// slice's token a fencing token outside int32 (the planting write of a
// routing pin), endpoints without a token, and removing the token; the
// sidecar's own writes pass.
func TestSlicePolicyBoundsTheToken(t *testing.T) {
	t.Parallel()
	const namespace = "slice-policy-token"
	ctx := context.Background()
	_, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	slices := tokenClient(t, kubeconfig).DiscoveryV1().EndpointSlices(namespace)
	own, err := slices.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dry := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	with := func(token string, addresses ...string) *discoveryv1.EndpointSlice {
		s := own.DeepCopy()
		s.Annotations = map[string]string{routing.HolderAnnotation: "pod-a"}
		if token != "" {
			s.Annotations[routing.FencingTokenAnnotation] = token
		}
		for _, a := range addresses {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		s.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8081), Protocol: ptr.To(corev1.ProtocolTCP)}}
		return s
	}
	waitRefused(t, "publishing an endpoint with token 9e18", func() error {
		_, err := slices.Update(ctx, with("9000000000000000000", "10.9.9.9"), dry)
		return err
	})
	// The sidecar's write, stored, so that the removal below has a token
	// to remove.
	stored, err := slices.Update(ctx, with("3", podIP("pod-a")), metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("publishing its endpoint with token 3, as the sidecar does: %v", err)
	}
	own = stored
	emptied := stored.DeepCopy()
	emptied.Endpoints = nil
	noToken := stored.DeepCopy()
	delete(noToken.Annotations, routing.FencingTokenAnnotation)
	for _, tc := range []struct {
		what  string
		slice *discoveryv1.EndpointSlice
		allow bool
	}{
		{what: "publish an endpoint with the largest int32 token", slice: with("2147483647", podIP("pod-a")), allow: true},
		{what: "empty the slice, keeping the token (withdraw)", slice: emptied, allow: true},
		{what: "publish an endpoint with token 9e18", slice: with("9000000000000000000", "10.9.9.9")},
		{what: "publish an endpoint with token 2^31", slice: with("2147483648", "10.9.9.9")},
		{what: "publish an endpoint with a token that is not a number", slice: with("x", "10.9.9.9")},
		{what: "remove the token", slice: noToken},
	} {
		_, err := slices.Update(ctx, tc.slice, dry)
		checkPolicyVerdict(t, tc.what, tc.allow, err)
	}
}

// TestPartitionPolicyKeepsTheTokenToItsGroup: in partition mode the
// ServiceAccount's Role may write every Lease of the namespace; the
// chart's admission policy lets its token create, update and delete only
// the group's partition and membership Leases.
func TestPartitionPolicyKeepsTheTokenToItsGroup(t *testing.T) {
	t.Parallel()
	const namespace = "partition-policy"
	ctx := context.Background()
	const group = "r-leader-elector"
	_, kubeconfig := chartInstall(t, namespace, group, "--set", "partitions.count=4")
	admin := controlPlane.AdminClient().CoordinationV1().Leases(namespace)
	foreign := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "another-app"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone")}}
	if _, err := admin.Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := tokenClient(t, kubeconfig).CoordinationV1().Leases(namespace)
	create := func(name string) func() error {
		return func() error {
			_, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
	}
	waitRefused(t, "creating a Lease outside the group", create("another-group-p0"))
	mine, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: group + "-p3"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating partition 3's Lease: %v", err)
	}
	theirs, err := leases.Get(ctx, foreign.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("reading another Lease (RBAC allows it): %v", err)
	}
	theirs.Spec.HolderIdentity = ptr.To("attacker")
	mine.Spec.HolderIdentity = ptr.To("pod-a")
	for _, tc := range []struct {
		what  string
		call  func() error
		allow bool
	}{
		{what: "create a partition Lease", call: create(group + "-p0"), allow: true},
		{what: "create partition 1023's Lease", call: create(group + "-p1023"), allow: true},
		{what: "create a membership Lease", call: create(group + "-m-0123456789"), allow: true},
		{what: "update its partition Lease", call: func() error { _, err := leases.Update(ctx, mine, metav1.UpdateOptions{}); return err }, allow: true},
		{what: "delete its partition Lease", call: func() error { return leases.Delete(ctx, mine.Name, metav1.DeleteOptions{}) }, allow: true},
		{what: "create a Lease of another group", call: create("another-group-p0")},
		{what: "create the group's own name", call: create(group)},
		{what: "create a Lease of a group named like a prefix of its own", call: create(group + "-x-p0")},
		{what: "create a membership Lease with a name that is not a hash", call: create(group + "-m-evil")},
		{what: "create a partition Lease with a leading zero", call: create(group + "-p01")},
		{what: "update another application's Lease", call: func() error { _, err := leases.Update(ctx, theirs, metav1.UpdateOptions{}); return err }},
		{what: "delete another application's Lease", call: func() error { return leases.Delete(ctx, foreign.Name, metav1.DeleteOptions{}) }},
	} {
		err := tc.call()
		switch {
		case tc.allow && err != nil:
			t.Errorf("%s with the sidecar's token: %v, want allowed", tc.what, err)
		case !tc.allow && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy")):
			t.Errorf("%s with the sidecar's token: %v, want forbidden by the admission policy", tc.what, err)
		default:
			t.Logf("%s: %v", tc.what, err)
		}
	}
	// Lease writes elsewhere are not matched.
	if _, err := controlPlane.AdminClient().CoordinationV1().Leases("kube-system").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-elsewhere", group)}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the admin creating a Lease in kube-system: %v, want allowed", err)
	}
}
