//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/routing"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// The tests here check, on the real API server, what the routing modes'
// ServiceAccount token can do beyond what the sidecar does, with exactly
// what the examples ship: the Role and the admission policy.

// tokenClient is a client that authenticates with kubeconfig's token.
func tokenClient(t *testing.T, kubeconfig string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// waitRefused polls try (a dry run) until the API server refuses it as
// forbidden: the admission policy and its binding are applied, but the
// API server takes them into use a moment later.
func waitRefused(t *testing.T, what string, try func() error) {
	t.Helper()
	var last error
	start := time.Now()
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		last = try()
		return apierrors.IsForbidden(last), nil
	}); err != nil {
		t.Fatalf("%s with the sidecar's token is still not refused after 20s (the shipped admission policy does not hold): last %v", what, last)
	}
	t.Logf("MEASURED %s refused %v after the policy was applied: %v", what, time.Since(start).Round(time.Millisecond), last)
}

func mergePatch(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRouteLabelAdmissionPolicy: the label-mode token may do what the
// sidecar does — join its group, flip the leader label, write its fencing
// token — and nothing else on a pod, though its Role grants patch on every
// pod of the namespace: no image, no env var, no other label or
// annotation, no owner, no other value, no pod of another group. The
// admin still may.
func TestRouteLabelAdmissionPolicy(t *testing.T) {
	t.Parallel()
	const namespace = "route-label-policy"
	ctx := context.Background()
	spec, podLabels, kubeconfig, lease := routedExample(t, "example-label", namespace)
	createPods(t, namespace, spec, podLabels, "pod-a", "pod-b", "another-group")
	admin := controlPlane.AdminClient().CoreV1().Pods(namespace)
	if _, err := admin.Patch(ctx, "another-group", types.MergePatchType, mergePatch(t, map[string]any{"metadata": map[string]any{"labels": map[string]string{routing.GroupLabel: "another-lease", routing.DefaultLeaderLabel: "false"}}}), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := tokenClient(t, kubeconfig).CoreV1().Pods(namespace)
	patch := func(pod string, pt types.PatchType, body []byte, dryRun bool) error {
		opts := metav1.PatchOptions{}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err := pods.Patch(ctx, pod, pt, body, opts)
		return err
	}
	labels := func(l map[string]string) []byte {
		return mergePatch(t, map[string]any{"metadata": map[string]any{"labels": l}})
	}
	image := []byte(`[{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example.com/evil:1"}]`)
	waitRefused(t, "changing a container's image", func() error { return patch("pod-a", types.JSONPatchType, image, true) })

	// What the sidecar writes, in its order: join the group as a follower,
	// then label itself leader with its term's token, then step down.
	for _, step := range []struct {
		what string
		body []byte
	}{
		{"join the group", labels(map[string]string{routing.DefaultLeaderLabel: "false", routing.GroupLabel: lease})},
		{"label itself leader with its fencing token", mergePatch(t, map[string]any{"metadata": map[string]any{
			"labels": map[string]string{routing.DefaultLeaderLabel: "true", routing.GroupLabel: lease}, "annotations": map[string]string{routing.FencingTokenAnnotation: "7"}}})},
		{"step down", labels(map[string]string{routing.DefaultLeaderLabel: "false", routing.GroupLabel: lease})},
	} {
		if err := patch("pod-a", types.MergePatchType, step.body, false); err != nil {
			t.Errorf("%s with the sidecar's token: %v, want allowed", step.what, err)
		}
	}
	p, err := admin.Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[routing.DefaultLeaderLabel] != "false" || p.Labels[routing.GroupLabel] != lease || p.Annotations[routing.FencingTokenAnnotation] != "7" {
		t.Errorf("pod-a after the sidecar's writes: labels %v, annotations %v", p.Labels, p.Annotations)
	}

	env := []byte(`[{"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "EVIL", "value": "1"}}]`)
	for _, tc := range []struct {
		what string
		pod  string
		pt   types.PatchType
		body []byte
		// byPodValidation: the API server refuses it whatever the policy
		// (an immutable field of the pod), as 422 Invalid.
		byPodValidation bool
	}{
		{what: "change a container's image", pod: "pod-a", pt: types.JSONPatchType, body: image},
		{what: "add an env var", pod: "pod-a", pt: types.JSONPatchType, body: env, byPodValidation: true},
		{what: "add a toleration", pod: "pod-a", pt: types.JSONPatchType, body: []byte(`[{"op": "add", "path": "/spec/tolerations/-", "value": {"key": "evil", "operator": "Exists"}}]`)},
		{what: "change another label", pod: "pod-a", pt: types.MergePatchType, body: labels(map[string]string{"app.kubernetes.io/name": "other-app"})},
		{what: "add another label", pod: "pod-a", pt: types.MergePatchType, body: labels(map[string]string{"role": "primary"})},
		{what: "remove another label", pod: "pod-a", pt: types.MergePatchType, body: mergePatch(t, map[string]any{"metadata": map[string]any{"labels": map[string]any{"app.kubernetes.io/name": nil}}})},
		{what: "add an annotation", pod: "pod-a", pt: types.MergePatchType, body: mergePatch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/evil": "1"}}})},
		{what: "set the leader label to another value", pod: "pod-a", pt: types.MergePatchType, body: labels(map[string]string{routing.DefaultLeaderLabel: "yes"})},
		{what: "move the pod to another group", pod: "pod-a", pt: types.MergePatchType, body: labels(map[string]string{routing.GroupLabel: "another-lease"})},
		{what: "label a pod of another group leader", pod: "another-group", pt: types.MergePatchType, body: labels(map[string]string{routing.DefaultLeaderLabel: "true"})},
		{what: "write a fencing token that is not one", pod: "pod-a", pt: types.MergePatchType, body: mergePatch(t, map[string]any{"metadata": map[string]any{"annotations": map[string]string{routing.FencingTokenAnnotation: "x"}}})},
		{what: "give the pod an owner", pod: "pod-a", pt: types.MergePatchType, body: mergePatch(t, map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "1"}}}})},
	} {
		err := patch(tc.pod, tc.pt, tc.body, false)
		switch {
		case tc.byPodValidation:
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Errorf("%s with the sidecar's token: %v, want refused", tc.what, err)
			}
		case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
			t.Errorf("%s with the sidecar's token: %v, want forbidden by the admission policy", tc.what, err)
		}
	}
	p2, err := admin.Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p2.Spec.Containers[0].Image != p.Spec.Containers[0].Image || p2.ResourceVersion != p.ResourceVersion {
		t.Errorf("pod-a changed: image %s, resourceVersion %s → %s", p2.Spec.Containers[0].Image, p.ResourceVersion, p2.ResourceVersion)
	}
	// The policy binds the sidecar's token only.
	if _, err := admin.Patch(ctx, "pod-b", types.JSONPatchType, image, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("the admin changing an image: %v, want allowed", err)
	}
}

// TestRouteEndpointSliceAdmission: the endpointslice-mode token may update
// its own Service's shipped EndpointSlice as the sidecar does (and empty
// it), and cannot create a slice, nor change one of another Service, nor
// turn its own into another Service's.
func TestRouteEndpointSliceAdmission(t *testing.T) {
	t.Parallel()
	const namespace = "route-endpointslice-policy"
	ctx := context.Background()
	_, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
	admin := controlPlane.AdminClient()
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if _, err := admin.CoreV1().Services(namespace).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	otherSlice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "other-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: "other", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.1.0.1"}}},
	}
	if _, err := admin.DiscoveryV1().EndpointSlices(namespace).Create(ctx, otherSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := tokenClient(t, kubeconfig).DiscoveryV1().EndpointSlices(namespace)
	own, err := slices.Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the shipped EndpointSlice %s: %v", lease, err)
	}
	dryRun := metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}}
	relabelled := own.DeepCopy()
	relabelled.Labels[discoveryv1.LabelServiceName] = "other"
	relabelled.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}}}
	waitRefused(t, "relabelling its EndpointSlice as another Service's", func() error {
		_, err := slices.Update(ctx, relabelled, dryRun)
		return err
	})

	// What the sidecar writes: one endpoint, with its token.
	mine := own.DeepCopy()
	mine.Annotations = map[string]string{routing.FencingTokenAnnotation: "3", routing.HolderAnnotation: "pod-a"}
	mine.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{podIP("pod-a")}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}}
	mine.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8081), Protocol: ptr.To(corev1.ProtocolTCP)}}
	if _, err := slices.Update(ctx, mine, dryRun); err != nil {
		t.Errorf("writing its own slice as the sidecar does: %v, want allowed", err)
	}
	emptied := mine.DeepCopy()
	emptied.Endpoints = nil
	if _, err := slices.Update(ctx, emptied, dryRun); err != nil {
		t.Errorf("emptying its own slice as the sidecar does on withdrawing: %v, want allowed", err)
	}

	evil := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "other-evil", Labels: map[string]string{discoveryv1.LabelServiceName: "other", discoveryv1.LabelManagedBy: routing.ManagedBy}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}}},
	}
	ownName := evil.DeepCopy()
	ownName.Name = lease
	notManaged := mine.DeepCopy()
	notManaged.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
	theirs, err := admin.DiscoveryV1().EndpointSlices(namespace).Get(ctx, otherSlice.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	theirs.Endpoints = []discoveryv1.Endpoint{{Addresses: []string{"10.9.9.9"}}}
	// By RBAC: no create, no patch, no delete, nothing but its own slice.
	for what, call := range map[string]func() error{
		"create a slice for another Service": func() error { _, err := slices.Create(ctx, evil, metav1.CreateOptions{}); return err },
		"create a slice named like its own":  func() error { _, err := slices.Create(ctx, ownName, metav1.CreateOptions{}); return err },
		"update another Service's slice":     func() error { _, err := slices.Update(ctx, theirs, metav1.UpdateOptions{}); return err },
		"patch another Service's slice": func() error {
			_, err := slices.Patch(ctx, otherSlice.Name, types.MergePatchType, []byte(`{"endpoints":[{"addresses":["10.9.9.9"]}]}`), metav1.PatchOptions{})
			return err
		},
		"patch its own slice": func() error {
			_, err := slices.Patch(ctx, lease, types.MergePatchType, []byte(`{"metadata":{"labels":{"kubernetes.io/service-name":"other"}}}`), metav1.PatchOptions{})
			return err
		},
		"delete its own slice": func() error { return slices.Delete(ctx, lease, metav1.DeleteOptions{}) },
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s with the sidecar's token: %v, want forbidden", what, err)
		}
	}
	// By the admission policy: its own slice stays its own Service's.
	for what, s := range map[string]*discoveryv1.EndpointSlice{
		"relabel its own slice as another Service's": relabelled,
		"hand its slice to another manager":          notManaged,
	} {
		if _, err := slices.Update(ctx, s, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("%s with the sidecar's token: %v, want forbidden by the admission policy", what, err)
		}
	}
	list, err := admin.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if strings.Join(e.Addresses, ",") == "10.9.9.9" {
				t.Errorf("Service other routes to the token's address through %s", s.Name)
			}
		}
	}
}

// TestRouteLabelRefusesATakenLabel: a --leader-label that Kubernetes
// reserves makes the sidecar exit 2; one that the pod's controller selects
// its pods by, or that the pod already carries with a value of its own,
// makes it exit 1 at startup, before it serves or takes part in the
// election; and it writes nothing.
func TestRouteLabelRefusesATakenLabel(t *testing.T) {
	t.Parallel()
	const namespace = "route-label-taken"
	ctx := context.Background()
	spec, podLabels, kubeconfig, _ := routedExample(t, "example-label", namespace)
	admin := controlPlane.AdminClient()
	// A ReplicaSet (no controller runs it here) selecting on tier, and its
	// pods: one carries the app's own label role.
	rs := &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db-5d8"},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "db"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"tier": "db"}}, Spec: *spec.DeepCopy()},
		},
	}
	rs, err := admin.AppsV1().ReplicaSets(namespace).Create(ctx, rs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string]string{"tier": "db", "role": "primary"}
	for k, v := range podLabels {
		owned[k] = v
	}
	createPods(t, namespace, spec, owned, "pod-a")
	if _, err := admin.CoreV1().Pods(namespace).Patch(ctx, "pod-a", types.MergePatchType, mergePatch(t, map[string]any{"metadata": map[string]any{
		"ownerReferences": []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}}}), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// run runs the sidecar as the example configures it, with label, and
	// expects it to exit with code (within a bound: a sidecar that takes
	// the label runs on, and is killed).
	run := func(t *testing.T, label string, code int, want string) {
		t.Helper()
		args, env := podTemplateCommand(t, spec, "pod-a", namespace, kubeconfig, harnesstest.FreePorts(t, 2), "--leader-label="+label)
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, binary, args...)
		cmd.Env = append(env, "GORACE=atexit_sleep_ms=20")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != code || cctx.Err() != nil {
			t.Fatalf("--leader-label=%s: %v (context: %v), want exit %d\n%s", label, err, cctx.Err(), code, out)
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("--leader-label=%s: no %q in the output:\n%s", label, want, out)
		}
		if strings.Contains(string(out), "Starting") {
			t.Errorf("--leader-label=%s: started before refusing:\n%s", label, out)
		}
	}
	t.Run("a key Kubernetes reserves: exit 2", func(t *testing.T) {
		run(t, "pod-template-hash", 2, `invalid configuration: --leader-label "pod-template-hash" is reserved`)
	})
	t.Run("a label the pod carries with its own value", func(t *testing.T) {
		run(t, "role", 1, `carries role=\"primary\"`)
	})
	t.Run("a selector key the shipped Role cannot read but the pod carries", func(t *testing.T) {
		run(t, "tier", 1, `carries tier=\"db\"`)
	})
	t.Run("a selector key the pod lacks, with get on replicasets granted", func(t *testing.T) {
		// Users who grant the read get the exact check.
		if _, err := admin.CoreV1().Pods(namespace).Patch(ctx, "pod-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":null}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		grantReplicaSetReads(t, namespace, spec.ServiceAccountName)
		run(t, "tier", 1, "ReplicaSet "+namespace+"/db-5d8 selects its pods by tier")
	})
	p, err := admin.CoreV1().Pods(namespace).Get(ctx, "pod-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels["role"] != "primary" || p.Labels[routing.GroupLabel] != "" {
		t.Errorf("pod-a's labels changed: %v", p.Labels)
	}
}

// grantReplicaSetReads lets the ServiceAccount get ReplicaSets, which the
// shipped Role does not.
func grantReplicaSetReads(t *testing.T, namespace, sa string) {
	t.Helper()
	ctx := context.Background()
	grantRole(t, namespace, namespace, sa, "read-replicasets", rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"replicasets"}, Verbs: []string{"get"}})
	// RBAC takes a moment to see a new binding.
	ok := func(context.Context) (bool, error) {
		r, err := controlPlane.AdminClient().AuthorizationV1().SubjectAccessReviews().Create(ctx, subjectAccessReview(namespace, sa), metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return r.Status.Allowed, nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, giveUp, true, ok); err != nil {
		t.Fatal(errors.Join(fmt.Errorf("get on replicasets never allowed"), err))
	}
}

func subjectAccessReview(namespace, sa string) *authorizationv1.SubjectAccessReview {
	return &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + namespace + ":" + sa,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Group: "apps", Resource: "replicasets", Verb: "get"},
	}}
}

// TestHelmInstallRouteLabel: `helm install` of the chart in label mode
// installs the cluster-scoped admission policy with the release, the
// chart's ServiceAccount token is bound by it, sidecars configured as the
// chart configures them route with it, and `helm uninstall` removes it.
func TestHelmInstallRouteLabel(t *testing.T) {
	t.Parallel()
	const namespace, release = "helm-route-label", "e2e"
	ctx := context.Background()
	restrictedNamespace(t, namespace)
	helm := func(args ...string) {
		t.Helper()
		if out, err := packaging.Run(ctx, "helm", append(args, "--kubeconfig", controlPlane.AdminKubeconfig(), "--namespace", namespace)...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	helm(append([]string{"install", release, packaging.ChartDir()}, packaging.WithImage("--set", "demo.enabled=true", "--set", "routing.mode=label", "--set", "election.readiness=candidate")...)...)
	fullname := release + "-leader-elector"
	policyName := "leader-elector-route-label." + namespace + "." + fullname
	admin := controlPlane.AdminClient()
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policyName, metav1.GetOptions{}); err != nil {
		t.Fatalf("the chart's admission policy: %v", err)
	}
	d, err := admin.AppsV1().Deployments(namespace).Get(ctx, fullname+"-demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &d.Spec.Template.Spec
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	pods := []string{"pod-a", "pod-b"}
	createPods(t, namespace, spec, d.Spec.Template.Labels, pods...)
	image := []byte(`[{"op": "replace", "path": "/spec/containers/0/image", "value": "registry.example.com/evil:1"}]`)
	sa := tokenClient(t, kubeconfig).CoreV1().Pods(namespace)
	waitRefused(t, "changing a container's image", func() error {
		_, err := sa.Patch(ctx, "pod-a", types.JSONPatchType, image, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	labels := watchLabels(t, namespace)
	g := routedGroup(t, spec, namespace, fullname, kubeconfig, pods...)
	labels.waitLabelled(g.WaitLeader(giveUp), giveUp)
	noneRefused(t, g)

	helm("uninstall", release)
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policyName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall, the admission policy: %v, want not found", err)
	}
	if _, err := admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Get(ctx, policyName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall, the binding: %v, want not found", err)
	}
}
