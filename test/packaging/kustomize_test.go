//go:build integration

package packaging

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

const exampleNamespace = "leader-elector-example"

func kustomize(t *testing.T, dir string) (Objects, *appsv1.Deployment) {
	t.Helper()
	objs, err := KustomizeBuild(context.Background(), ManifestsDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	return objs, &d
}

// TestKustomizeExample checks what `kubectl apply -k manifests/example`
// creates: exactly the objects listed, all in the example's namespace, the
// Role's rules exactly, a pod template that holds everything the sidecar
// needs, and names that agree after namePrefix renamed them.
func TestKustomizeExample(t *testing.T) {
	objs, d := kustomize(t, "example")
	want := []string{
		"Namespace/" + exampleNamespace,
		"ServiceAccount/example-leader-elector", "Role/example-leader-elector", "RoleBinding/example-leader-elector", "Lease/example-leader-elector",
		"Deployment/example-demo", "Service/example-demo",
	}
	if got := objs.Kinds(); !sameElements(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	for _, u := range objs {
		if u.GetKind() != "Namespace" && u.GetNamespace() != exampleNamespace {
			t.Errorf("%s/%s is in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
	}
	var ns corev1.Namespace
	if err := objs.OneInto("Namespace", &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("the example namespace does not enforce Pod Security restricted: %v", ns.Labels)
	}

	var role rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if want := sidecarRules(t, "example-leader-elector"); !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("Role rules:\n%s\nwant exactly:\n%s", asJSON(role.Rules), asJSON(want))
	}
	var binding rbacv1.RoleBinding
	if err := objs.OneInto("RoleBinding", &binding); err != nil {
		t.Fatal(err)
	}
	wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "example-leader-elector", Namespace: exampleNamespace}}
	if binding.RoleRef.Name != role.Name || binding.RoleRef.Kind != "Role" || !equality.Semantic.DeepEqual(binding.Subjects, wantSubjects) {
		t.Errorf("RoleBinding binds %+v to %+v", binding.Subjects, binding.RoleRef)
	}

	for _, err := range CheckSidecarPod(&d.Spec.Template.Spec, true) {
		t.Error(err)
	}
	checkWiring(t, objs, d)
	if !equality.Semantic.DeepEqual(d.Spec.Strategy, leaderStrategy) {
		t.Errorf("strategy %s, want %s", asJSON(d.Spec.Strategy), asJSON(leaderStrategy))
	}
	sc, _, _ := Sidecar(&d.Spec.Template.Spec)
	if readiness, ok := FlagValue(sc.Args, "readiness"); ok && readiness != "leader" {
		t.Errorf("--readiness=%s: the example's Service routes to the leader only with readiness leader", readiness)
	}
	for _, c := range append(slices.Clone(d.Spec.Template.Spec.InitContainers), d.Spec.Template.Spec.Containers...) {
		if !strings.Contains(strings.Split(c.Image, "/")[0], ".") {
			t.Errorf("container %s: image %q does not name its registry", c.Name, c.Image)
		}
	}
	if !binaryVerdict(t, append(slices.Clone(sc.Args), "--lease-name=example-leader-elector")) {
		t.Errorf("leader-elector refuses the example's arguments %v", sc.Args)
	}
}

// TestKustomizePre129: the variant for clusters without native sidecars
// runs the very same sidecar as an ordinary container.
func TestKustomizePre129(t *testing.T) {
	_, native := kustomize(t, "example")
	objs, d := kustomize(t, "example-pre-1.29")
	spec := &d.Spec.Template.Spec
	if len(spec.InitContainers) != 0 {
		t.Errorf("init containers left: %v", spec.InitContainers)
	}
	for _, err := range CheckSidecarPod(spec, false) {
		t.Error(err)
	}
	checkWiring(t, objs, d)
	want, _, _ := Sidecar(&native.Spec.Template.Spec)
	want = want.DeepCopy()
	want.RestartPolicy = nil
	got, _, _ := Sidecar(spec)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("the pre-1.29 sidecar differs from the example's:\n%s\nwant\n%s", asJSON(got), asJSON(want))
	}
}

// TestChartAndManifestsAgree: the sidecar the chart renders and the one in
// manifests/example are the same apart from how they get the Lease's name,
// so users of either get the same probes, resources, security and token.
func TestChartAndManifestsAgree(t *testing.T) {
	_, fromChart := demo(t)
	_, fromKustomize := kustomize(t, "example")
	c, _, _ := Sidecar(&fromChart.Spec.Template.Spec)
	k, _, _ := Sidecar(&fromKustomize.Spec.Template.Spec)
	withoutLeaseName := func(env []corev1.EnvVar) []corev1.EnvVar {
		return slices.DeleteFunc(slices.Clone(env), func(e corev1.EnvVar) bool { return e.Name == "LEADER_ELECTOR_LEASE_NAME" })
	}
	for _, f := range []struct {
		name        string
		chart, kust any
	}{
		{"ports", c.Ports, k.Ports},
		{"readinessProbe", c.ReadinessProbe, k.ReadinessProbe},
		{"livenessProbe", c.LivenessProbe, k.LivenessProbe},
		{"resources", c.Resources, k.Resources},
		{"securityContext", c.SecurityContext, k.SecurityContext},
		{"volumeMounts", c.VolumeMounts, k.VolumeMounts},
		{"restartPolicy", c.RestartPolicy, k.RestartPolicy},
		{"env", withoutLeaseName(c.Env), withoutLeaseName(k.Env)},
		{"strategy", fromChart.Spec.Strategy, fromKustomize.Spec.Strategy},
		{"replicas", fromChart.Spec.Replicas, fromKustomize.Spec.Replicas},
		{"terminationGracePeriodSeconds", fromChart.Spec.Template.Spec.TerminationGracePeriodSeconds, fromKustomize.Spec.Template.Spec.TerminationGracePeriodSeconds},
		{"pod securityContext", fromChart.Spec.Template.Spec.SecurityContext, fromKustomize.Spec.Template.Spec.SecurityContext},
		{"token volume", tokenVolume(&fromChart.Spec.Template.Spec), tokenVolume(&fromKustomize.Spec.Template.Spec)},
	} {
		if !equality.Semantic.DeepEqual(f.chart, f.kust) {
			t.Errorf("%s: the chart has\n%s\nmanifests/example has\n%s", f.name, asJSON(f.chart), asJSON(f.kust))
		}
	}
}

func tokenVolume(spec *corev1.PodSpec) *corev1.Volume {
	for i, v := range spec.Volumes {
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }) {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// TestKustomizeObserver: the observer component leaves the Role exactly the
// chart's observer rules, on the overlay's Lease name.
func TestKustomizeObserver(t *testing.T) {
	objs, err := KustomizeBuild(context.Background(), inRepo("test", "packaging", "testdata", "observer"))
	if err != nil {
		t.Fatal(err)
	}
	const name = "followers-leader-elector"
	var role, chartRole rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if err := helmTemplate(t, "--set", "election.candidate=false", "--set", "election.readiness=candidate", "--set", "lease.create=false", "--set", "lease.name="+name).OneInto("Role", &chartRole); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, chartRole.Rules) {
		t.Errorf("Role rules:\n%s\nwant the chart's observer rules:\n%s", asJSON(role.Rules), asJSON(chartRole.Rules))
	}
}

// TestKustomizePartitions: the partitions component, used in an overlay of
// the named base, replaces the leader Role's rules with exactly the chart's
// partition-mode rules (which the e2e suite runs partition mode with),
// keeps the base's Lease to carry the renamed group name, and adds the
// chart's admission policy, written for the group's final names.
func TestKustomizePartitions(t *testing.T) {
	objs, err := KustomizeBuild(context.Background(), inRepo("test", "packaging", "testdata", "partitions"))
	if err != nil {
		t.Fatal(err)
	}
	const name, ns = "workers-leader-elector", "workers"
	policyName := "leader-elector-partitions." + ns + "." + name
	want := []string{"ServiceAccount/" + name, "Role/" + name, "RoleBinding/" + name, "Lease/" + name,
		"ValidatingAdmissionPolicy/" + policyName, "ValidatingAdmissionPolicyBinding/" + policyName}
	if got := objs.Kinds(); !sameElements(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}
	chart, err := HelmTemplate(context.Background(), ChartDir(), release, ns, WithImage("--set", "partitions.count=16", "--set", "fullnameOverride="+name)...)
	if err != nil {
		t.Fatal(err)
	}
	var role, chartRole rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if err := chart.OneInto("Role", &chartRole); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, chartRole.Rules) {
		t.Errorf("Role rules:\n%s\nwant the chart's partition-mode rules:\n%s", asJSON(role.Rules), asJSON(chartRole.Rules))
	}
	// The admission policy: the chart's, written for this ServiceAccount,
	// namespace and group.
	policiesAgree(t, chart, objs)
	policy, binding := admissionPolicy(t, objs)
	checkPolicyWrittenFor(t, policy, binding, ns, name)
	if got, want := policyVariable(policy, "prefix"), "'"+name+"' + '-'"; got != want {
		t.Errorf("policy's prefix %s, want %s", got, want)
	}
}
