package packaging

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/leader-elector/leader-elector/routing"
)

// RouteRules are the rules a --route mode adds to the Role, and nothing
// more: for endpointslice, get on the one Service and get/update on its
// slice (both named service), create on slices (RBAC cannot limit create
// by name); for label, get/list/patch on pods.
func RouteRules(mode routing.Mode, service string) []rbacv1.PolicyRule {
	switch mode {
	case routing.ModeEndpointSlice:
		return []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, ResourceNames: []string{service}, Verbs: []string{"get"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, ResourceNames: []string{service}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"create"}},
		}
	case routing.ModeLabel:
		return []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "patch"}}}
	}
	return nil
}

// routedWorkload checks what a routing mode needs of the rendered objects:
// the Role's rules exactly (the Lease's and the Events', then the mode's), the sidecar Ready
// as a candidate, a one-at-a-time rollout, leader-elector accepting the
// sidecar's configuration (arguments and literal environment values, with
// the downward API's pod IP), and a Service shaped for the mode: for
// endpointslice the sidecar's --service, without a selector; for label one
// that selects the leader label.
func routedWorkload(t *testing.T, objs Objects, d *appsv1.Deployment, mode routing.Mode, lease, service string) {
	t.Helper()
	var role rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if want := append(sidecarRules(t, lease), RouteRules(mode, service)...); !equality.Semantic.DeepEqual(role.Rules, want) {
		t.Errorf("Role rules:\n%s\nwant exactly:\n%s", asJSON(role.Rules), asJSON(want))
	}
	checkWiring(t, objs, d)
	spec := &d.Spec.Template.Spec
	for _, err := range CheckSidecarPod(spec, true) {
		t.Error(err)
	}
	if !equality.Semantic.DeepEqual(d.Spec.Strategy, candidateStrategy) {
		t.Errorf("strategy %s, want one pod at a time (%s)", asJSON(d.Spec.Strategy), asJSON(candidateStrategy))
	}
	sc, _, err := Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	setting := func(flag string) string {
		if v, ok := FlagValue(sc.Args, flag); ok {
			return v
		}
		v, _ := EnvValue(sc, "LEADER_ELECTOR_"+strings.ToUpper(strings.ReplaceAll(flag, "-", "_")))
		return v
	}
	if got := setting("route"); got != string(mode) {
		t.Errorf("sidecar --route %q, want %q", got, mode)
	}
	if got := setting("readiness"); got != "candidate" {
		t.Errorf("sidecar --readiness %q, want candidate: pods stay Ready so rollouts complete", got)
	}
	podIP := slices.IndexFunc(sc.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	}) >= 0
	if podIP != (mode == routing.ModeEndpointSlice) {
		t.Errorf("POD_IP from status.podIP: %v, want %v", podIP, mode == routing.ModeEndpointSlice)
	}
	env := []string{"POD_NAME=pod-0", "POD_NAMESPACE=ns", "POD_IP=10.0.0.1"}
	for _, e := range sc.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	cmd := exec.Command(binary, append(slices.Clone(sc.Args), "--kubeconfig=/nonexistent/kubeconfig")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if exit, ok := err.(*exec.ExitError); !ok || exit.ExitCode() != 1 {
		t.Errorf("leader-elector %v with %v: %v, want exit 1 (configuration accepted, no cluster)\n%s", sc.Args, env, err, out)
	}

	var svc corev1.Service
	if err := objs.OneInto("Service", &svc); err != nil {
		t.Fatal(err)
	}
	switch mode {
	case routing.ModeEndpointSlice:
		if got := setting("service"); got != service || svc.Name != service || len(svc.Spec.Selector) != 0 {
			t.Errorf("sidecar --service=%s, Service %s with selector %v; want both %s, no selector (the leader writes its EndpointSlice)", got, svc.Name, svc.Spec.Selector, service)
		}
	case routing.ModeLabel:
		if got := setting("leader-label"); svc.Spec.Selector[routing.DefaultLeaderLabel] != "true" || (got != "" && got != routing.DefaultLeaderLabel) {
			t.Errorf("sidecar --leader-label=%q, Service selector %v; want it to select %s=true", got, svc.Spec.Selector, routing.DefaultLeaderLabel)
		}
	}
}

// TestChartRouting: each routing mode adds exactly its rules to the Role,
// configures the sidecar, and shapes the demo's Service; the default
// rendering is TestChartRBAC's.
func TestChartRouting(t *testing.T) {
	full := release + "-leader-elector"
	for _, tc := range []struct {
		mode    routing.Mode
		set     []string
		service string
	}{
		{mode: routing.ModeEndpointSlice, service: full},
		{mode: routing.ModeEndpointSlice, set: []string{"--set", "routing.service=my-svc"}, service: "my-svc"},
		{mode: routing.ModeLabel},
	} {
		t.Run(string(tc.mode)+" "+strings.Join(tc.set, " "), func(t *testing.T) {
			set := append([]string{"--set", "routing.mode=" + string(tc.mode), "--set", "election.readiness=candidate"}, tc.set...)
			objs, d := demo(t, set...)
			routedWorkload(t, objs, d, tc.mode, full, tc.service)
		})
	}
	t.Run("routing.mode none renders as before", func(t *testing.T) {
		_, plain := demo(t)
		_, none := demo(t, "--set", "routing.mode=none")
		if !equality.Semantic.DeepEqual(plain, none) {
			t.Errorf("routing.mode=none changes the Deployment")
		}
	})
}

func TestChartRoutingGuards(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a routing mode with readiness leader", []string{"--set", "routing.mode=endpointslice"}, "set election.readiness=candidate"},
		{"an unknown mode", []string{"--set", "routing.mode=dns", "--set", "election.readiness=candidate"}, "routing/mode"},
		{"an invalid Service name", []string{"--set", "routing.mode=endpointslice", "--set", "election.readiness=candidate", "--set", "routing.service=My.Svc"}, "routing/service"},
		{"label mode with a Lease name too long for a label", []string{"--set", "routing.mode=label", "--set", "election.readiness=candidate", "--set", "lease.name=" + strings.Repeat("a", 64)}, "at most 63 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
}

// TestKustomizeRouting: manifests/example-endpointslice and example-label
// are the example with exactly the mode's rules added (by the components,
// after namePrefix), a Service for the mode, and the sidecar configured for
// it.
func TestKustomizeRouting(t *testing.T) {
	const lease = "example-leader-elector"
	for _, tc := range []struct {
		dir      string
		mode     routing.Mode
		services []string
	}{
		{"example-endpointslice", routing.ModeEndpointSlice, []string{"Service/" + lease}},
		{"example-label", routing.ModeLabel, []string{"Service/example-demo"}},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			objs, d := kustomize(t, tc.dir)
			want := append([]string{
				"Namespace/" + exampleNamespace,
				"ServiceAccount/" + lease, "Role/" + lease, "RoleBinding/" + lease, "Lease/" + lease,
				"Deployment/example-demo",
			}, tc.services...)
			if got := objs.Kinds(); !sameElements(got, want) {
				t.Errorf("objects %v, want %v", got, want)
			}
			routedWorkload(t, objs, d, tc.mode, lease, lease)
		})
	}
}
