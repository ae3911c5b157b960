//go:build integration

package packaging

import (
	"context"
	"slices"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// leasesRule is the Lease rule of manifests/base on exactly the named
// Leases.
func leasesRule(t *testing.T, leases ...string) rbacv1.PolicyRule {
	t.Helper()
	rule := leaseRule(t, leases[0])
	rule.ResourceNames = leases
	return rule
}

// checkHealthObjects checks the Role's rules exactly (the Lease rule names
// exactly the election's and the candidates Lease, with the base's verbs)
// and that both Leases are shipped with an empty spec.
func checkHealthObjects(t *testing.T, objs Objects, lease string, wantRules []rbacv1.PolicyRule) {
	t.Helper()
	var role rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(role.Rules, wantRules) {
		t.Errorf("Role rules:\n%s\nwant exactly:\n%s", asJSON(role.Rules), asJSON(wantRules))
	}
	var names []string
	for _, u := range objs.OfKind("Lease") {
		var l coordinationv1.Lease
		if err := Into(u, &l); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(l.Spec, coordinationv1.LeaseSpec{}) {
			t.Errorf("Lease %s sets spec fields: %s", l.Name, asJSON(l.Spec))
		}
		names = append(names, l.Name)
	}
	if want := []string{lease, lease + "-candidates"}; !sameElements(names, want) {
		t.Errorf("Leases %v, want %v", names, want)
	}
}

// TestChartHealthGating: healthGating.enabled renders the flags, ships the
// candidates Lease and names it in the Role; with the demo, the demo app's
// /healthz is the health endpoint; the sidecar accepts the arguments.
func TestChartHealthGating(t *testing.T) {
	full := release + "-leader-elector"
	objs, d := demo(t, "--set", "healthGating.enabled=true", "--set-json", "healthGating.periodSeconds=0.5", "--set", "healthGating.failures=2")
	checkHealthObjects(t, objs, full, []rbacv1.PolicyRule{leasesRule(t, full, full+"-candidates"), eventsRule})
	for _, err := range CheckSidecarPod(&d.Spec.Template.Spec, true) {
		t.Error(err)
	}
	sc, _, err := Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string]string{
		"app-health-url":       "http://127.0.0.1:8081/healthz",
		"app-health-period":    "0.5s",
		"app-health-failures":  "2",
		"app-health-successes": "1",
	} {
		if got, ok := FlagValue(sc.Args, flag); !ok || got != want {
			t.Errorf("--%s = %q (given %v), want %q", flag, got, ok, want)
		}
	}
	if !binaryVerdict(t, sc.Args) {
		t.Errorf("leader-elector refuses the chart's arguments %v", sc.Args)
	}
	// The demo app serves /healthz from a file a test can remove.
	var app string
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "app" {
			app = strings.Join(c.Args, "\n")
		}
	}
	if !strings.Contains(app, "echo ok > /tmp/www/healthz") || !strings.Contains(app, "httpd -f -p 8081 -h /tmp/www") {
		t.Errorf("the demo app does not serve /healthz on 8081 from /tmp/www/healthz:\n%s", app)
	}

	// In partition mode: the probe's flags, and no candidates Lease (the
	// members publish their health on their membership Leases).
	objs, d = demo(t, "--set", "healthGating.enabled=true", "--set", "partitions.count=2")
	sc, _, err = Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := FlagValue(sc.Args, "app-health-url"); !ok || got != "http://127.0.0.1:8081/healthz" {
		t.Errorf("partition mode: --app-health-url = %q (given %v)", got, ok)
	}
	if slices.ContainsFunc(sc.Args, func(a string) bool {
		return strings.HasPrefix(a, "--name-successor") || strings.HasPrefix(a, "--check-pod")
	}) {
		t.Errorf("partition mode: leader mode's successor flags in %v", sc.Args)
	}
	for _, u := range objs.OfKind("Lease") {
		if strings.HasSuffix(u.GetName(), "-candidates") {
			t.Errorf("partition mode ships the candidates Lease %s", u.GetName())
		}
	}
	if !binaryVerdict(t, sc.Args) {
		t.Errorf("leader-elector refuses the chart's partition-mode arguments %v", sc.Args)
	}

	// Off by default: no flag, no candidates Lease, the Role names one Lease.
	_, d = demo(t)
	sc, _, _ = Sidecar(&d.Spec.Template.Spec)
	if slices.ContainsFunc(sc.Args, func(a string) bool { return strings.HasPrefix(a, "--app-health") }) {
		t.Errorf("health gating flags without healthGating.enabled: %v", sc.Args)
	}

	// Without the demo, the URL is given.
	objs = helmTemplate(t, "--set", "healthGating.enabled=true", "--set", "healthGating.url=http://127.0.0.1:9000/ready", "--set", "lease.name=my-app")
	checkHealthObjects(t, objs, "my-app", []rbacv1.PolicyRule{leasesRule(t, "my-app", "my-app-candidates"), eventsRule})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no URL without the demo", []string{"--set", "healthGating.enabled=true"}, "healthGating.enabled needs healthGating.url"},
		{"not loopback", []string{"--set", "healthGating.enabled=true", "--set", "healthGating.url=http://10.0.0.1:80/"}, "healthGating/url"},
		{"period too short", []string{"--set", "healthGating.enabled=true", "--set", "demo.enabled=true", "--set-json", "healthGating.periodSeconds=0.05"}, "healthGating/periodSeconds"},
		{"no failures", []string{"--set", "healthGating.enabled=true", "--set", "demo.enabled=true", "--set", "healthGating.failures=0"}, "healthGating/failures"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage(tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestChartSuccessor: successor.enabled renders --name-successor (not with
// healthGating, which implies it), the handover delay and the revision
// labels, ships the candidates Lease and names it in the Role; the sidecar
// accepts the arguments. In partition mode it is ignored.
func TestChartSuccessor(t *testing.T) {
	full := release + "-leader-elector"
	objs, d := demo(t, "--set", "successor.enabled=true", "--set", "successor.handoverToNewerRevisionSeconds=20")
	// get on pods: a candidate reads its own pod before a new term.
	getPods := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}
	checkHealthObjects(t, objs, full, []rbacv1.PolicyRule{leasesRule(t, full, full+"-candidates"), eventsRule, getPods})
	sc, _, err := Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sc.Args, "--name-successor") || slices.ContainsFunc(sc.Args, func(a string) bool { return strings.HasPrefix(a, "--app-health") }) {
		t.Errorf("args %v: want --name-successor and no health gating flags", sc.Args)
	}
	if !slices.Contains(sc.Args, "--check-pod-terminating") {
		t.Errorf("args %v: want --check-pod-terminating (the Role grants get on pods)", sc.Args)
	}
	if got, ok := FlagValue(sc.Args, "handover-to-newer-revision"); !ok || got != "20s" {
		t.Errorf("--handover-to-newer-revision = %q (given %v), want 20s", got, ok)
	}
	var revisionEnv []string
	for _, e := range sc.Env {
		if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.Contains(e.ValueFrom.FieldRef.FieldPath, "hash") {
			revisionEnv = append(revisionEnv, e.Name)
		}
	}
	if want := []string{"POD_TEMPLATE_HASH", "CONTROLLER_REVISION_HASH"}; !slices.Equal(revisionEnv, want) {
		t.Errorf("revision env %v, want %v from the pod's labels", revisionEnv, want)
	}
	if !binaryVerdict(t, sc.Args) {
		t.Errorf("leader-elector refuses the chart's arguments %v", sc.Args)
	}

	// With health gating: its flags, which imply --name-successor.
	_, d = demo(t, "--set", "successor.enabled=true", "--set", "healthGating.enabled=true")
	sc, _, _ = Sidecar(&d.Spec.Template.Spec)
	if slices.Contains(sc.Args, "--name-successor") || !slices.ContainsFunc(sc.Args, func(a string) bool { return strings.HasPrefix(a, "--app-health-url=") }) {
		t.Errorf("args %v: want --app-health-url and no --name-successor", sc.Args)
	}

	// In partition mode: ignored, no candidates Lease.
	objs = helmTemplate(t, "--set", "successor.enabled=true", "--set", "partitions.count=4")
	for _, u := range objs.OfKind("Lease") {
		if strings.HasSuffix(u.GetName(), "-candidates") {
			t.Errorf("partition mode ships %s", u.GetName())
		}
	}
}

// TestKustomizeHealthGating: the component adds the candidates Lease and
// names it in the base's Lease rule; an overlay's namePrefix renames both.
func TestKustomizeHealthGating(t *testing.T) {
	objs, err := KustomizeBuild(context.Background(), TestdataDir("health-gating"))
	if err != nil {
		t.Fatal(err)
	}
	lease := "my-app-leader-elector"
	checkHealthObjects(t, objs, lease, []rbacv1.PolicyRule{leasesRule(t, lease, lease+"-candidates"), eventsRule})
	for _, u := range objs {
		if u.GetNamespace() != "team-a" {
			t.Errorf("%s/%s is in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
	}
}
