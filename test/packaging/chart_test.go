//go:build integration

package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/leader-elector/leader-elector/routing"
)

const (
	release   = "r"
	namespace = "ns"
)

// helmTemplate renders the chart with the image repository set (the chart
// requires it) and extra helm arguments, which come later and so win.
func helmTemplate(t *testing.T, extra ...string) Objects {
	t.Helper()
	objs, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage(extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// baseRole is the Role of manifests/base: the chart must grant the same.
func baseRole(t *testing.T) rbacv1.Role {
	t.Helper()
	var role rbacv1.Role
	b, err := os.ReadFile(filepath.Join(ManifestsDir("base"), "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 2 || !equality.Semantic.DeepEqual(role.Rules[1], eventsRule) {
		t.Fatalf("manifests/base/role.yaml: want the Lease's rule, then the Events rule %s; got %s", asJSON(eventsRule), asJSON(role.Rules))
	}
	return role
}

// eventsRule lets the sidecar record Events (--events, on by default).
var eventsRule = rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}}

// sidecarRules are the rules of manifests/base on the named Lease: the
// Lease's rule and the Events rule.
func sidecarRules(t *testing.T, lease string) []rbacv1.PolicyRule {
	t.Helper()
	return []rbacv1.PolicyRule{leaseRule(t, lease), eventsRule}
}

// leaseRule is the one rule a sidecar needs, on the named Lease, with the
// verbs of manifests/base (get, list, watch, update).
func leaseRule(t *testing.T, lease string) rbacv1.PolicyRule {
	t.Helper()
	rule := baseRole(t).Rules[0]
	rule.ResourceNames = []string{lease}
	return rule
}

func asJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// TestChartRBAC checks the rendered RBAC rules exactly, and that the chart
// creates nothing cluster-scoped and nothing outside the release namespace.
func TestChartRBAC(t *testing.T) {
	full := release + "-leader-elector"
	cases := []struct {
		name      string
		set       []string
		kinds     []string // every object, Kind/name, in any order
		rules     func(t *testing.T) []rbacv1.PolicyRule
		subject   string
		leaseName string
	}{
		{
			name:    "defaults: the Lease is created, the Role names it and cannot create",
			kinds:   []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full, "Lease/" + full},
			rules:   func(t *testing.T) []rbacv1.PolicyRule { return sidecarRules(t, full) },
			subject: full, leaseName: full,
		},
		{
			name:  "lease.create=false: the sidecars create it, so the Role may create any Lease",
			set:   []string{"--set", "lease.create=false"},
			kinds: []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full},
			rules: func(t *testing.T) []rbacv1.PolicyRule {
				return []rbacv1.PolicyRule{leaseRule(t, full), {APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}}, eventsRule}
			},
			subject: full,
		},
		{
			name:    "lease.name",
			set:     []string{"--set", "lease.name=my-app"},
			kinds:   []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full, "Lease/my-app"},
			rules:   func(t *testing.T) []rbacv1.PolicyRule { return sidecarRules(t, "my-app") },
			subject: full, leaseName: "my-app",
		},
		{
			name:    "an existing ServiceAccount",
			set:     []string{"--set", "serviceAccount.create=false", "--set", "serviceAccount.name=existing"},
			kinds:   []string{"Role/" + full, "RoleBinding/" + full, "Lease/" + full},
			rules:   func(t *testing.T) []rbacv1.PolicyRule { return sidecarRules(t, full) },
			subject: "existing", leaseName: full,
		},
		{
			name:      "rbac.create=false",
			set:       []string{"--set", "rbac.create=false"},
			kinds:     []string{"ServiceAccount/" + full, "Lease/" + full},
			leaseName: full,
		},
		{
			// The admission policy that narrows it (cluster-scoped) is
			// TestKustomizePartitions'.
			name:  "partitions.count: no Lease; the sidecars create the group's Leases, list and watch them by label, delete their own membership Lease",
			set:   []string{"--set", "partitions.count=16", "--set", "partitions.admissionPolicy=false"},
			kinds: []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full},
			rules: func(t *testing.T) []rbacv1.PolicyRule {
				return []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}}
			},
			subject: full,
		},
		{
			name:    "election.events=false: no Events rule",
			set:     []string{"--set", "election.events=false"},
			kinds:   []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full, "Lease/" + full},
			rules:   func(t *testing.T) []rbacv1.PolicyRule { return []rbacv1.PolicyRule{leaseRule(t, full)} },
			subject: full, leaseName: full,
		},
		{
			name:  "election.candidate=false: observers get, list and watch the candidates' Lease, nothing else",
			set:   []string{"--set", "election.candidate=false", "--set", "election.readiness=candidate", "--set", "lease.create=false", "--set", "lease.name=my-app"},
			kinds: []string{"ServiceAccount/" + full, "Role/" + full, "RoleBinding/" + full},
			rules: func(t *testing.T) []rbacv1.PolicyRule {
				return []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{"my-app"}, Verbs: []string{"get", "list", "watch"}}}
			},
			subject: full,
		},
		{
			name:    "fullnameOverride",
			set:     []string{"--set", "fullnameOverride=elector"},
			kinds:   []string{"ServiceAccount/elector", "Role/elector", "RoleBinding/elector", "Lease/elector"},
			rules:   func(t *testing.T) []rbacv1.PolicyRule { return sidecarRules(t, "elector") },
			subject: "elector", leaseName: "elector",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := helmTemplate(t, tc.set...)
			if got := objs.Kinds(); !sameElements(got, tc.kinds) {
				t.Errorf("objects: %v, want %v", got, tc.kinds)
			}
			for _, u := range objs {
				if u.GetNamespace() != namespace {
					t.Errorf("%s/%s is in namespace %q, want %q (and nothing cluster-scoped)", u.GetKind(), u.GetName(), u.GetNamespace(), namespace)
				}
			}
			if tc.rules != nil {
				var role rbacv1.Role
				if err := objs.OneInto("Role", &role); err != nil {
					t.Fatal(err)
				}
				if want := tc.rules(t); !equality.Semantic.DeepEqual(role.Rules, want) {
					t.Errorf("Role rules:\n%s\nwant exactly:\n%s", asJSON(role.Rules), asJSON(want))
				}
				var binding rbacv1.RoleBinding
				if err := objs.OneInto("RoleBinding", &binding); err != nil {
					t.Fatal(err)
				}
				wantRef := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role.Name}
				wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: tc.subject, Namespace: namespace}}
				if binding.RoleRef != wantRef || !equality.Semantic.DeepEqual(binding.Subjects, wantSubjects) {
					t.Errorf("RoleBinding binds %+v to %+v, want %+v to %+v", binding.Subjects, binding.RoleRef, wantSubjects, wantRef)
				}
			}
			if tc.leaseName != "" {
				var lease coordinationv1.Lease
				if err := objs.OneInto("Lease", &lease); err != nil {
					t.Fatal(err)
				}
				if !equality.Semantic.DeepEqual(lease.Spec, coordinationv1.LeaseSpec{}) {
					t.Errorf("the shipped Lease sets spec fields the sidecars own: %s", asJSON(lease.Spec))
				}
			}
		})
	}
}

func sameElements(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// demo renders the chart with the demo workload and returns its Deployment.
func demo(t *testing.T, extra ...string) (Objects, *appsv1.Deployment) {
	t.Helper()
	objs := helmTemplate(t, append([]string{"--set", "demo.enabled=true"}, extra...)...)
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	return objs, &d
}

// TestChartSidecar checks the sidecar the chart's named templates put into
// a pod (here the demo's), in each mode.
func TestChartSidecar(t *testing.T) {
	cases := []struct {
		name         string
		set          []string
		native       bool
		wantStrategy appsv1.DeploymentStrategy
	}{
		{name: "defaults: native sidecar, readiness leader", native: true, wantStrategy: leaderStrategy},
		{name: "sidecar.native=false", set: []string{"--set", "sidecar.native=false"}, wantStrategy: leaderStrategy},
		{name: "readiness candidate", set: []string{"--set", "election.readiness=candidate"}, native: true, wantStrategy: candidateStrategy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, d := demo(t, tc.set...)
			for _, err := range CheckSidecarPod(&d.Spec.Template.Spec, tc.native) {
				t.Error(err)
			}
			if !equality.Semantic.DeepEqual(d.Spec.Strategy, tc.wantStrategy) {
				t.Errorf("strategy %s, want %s", asJSON(d.Spec.Strategy), asJSON(tc.wantStrategy))
			}
			checkWiring(t, objs, d)
			sc, _, _ := Sidecar(&d.Spec.Template.Spec)
			if !binaryVerdict(t, sc.Args) {
				t.Errorf("leader-elector refuses the chart's arguments %v", sc.Args)
			}
		})
	}
	t.Run("manual campaign", func(t *testing.T) {
		_, d := demo(t, "--set", "election.campaign=manual")
		sc, _, _ := Sidecar(&d.Spec.Template.Spec)
		if v, ok := FlagValue(sc.Args, "campaign"); !ok || v != "manual" {
			t.Errorf("args %v, want --campaign=manual", sc.Args)
		}
		if !binaryVerdict(t, sc.Args) {
			t.Errorf("leader-elector refuses the chart's arguments %v", sc.Args)
		}
	})
	// partitions.drainTimeoutSeconds: --drain-timeout in partition mode only.
	t.Run("drain timeout", func(t *testing.T) {
		for _, tc := range []struct {
			set  []string
			want string
		}{
			{[]string{"--set", "partitions.count=4"}, "10s"},
			{[]string{"--set", "partitions.count=4", "--set", "partitions.drainTimeoutSeconds=0"}, "0s"},
			{[]string{"--set", "partitions.count=4", "--set-json", "partitions.drainTimeoutSeconds=2.5"}, "2.5s"},
			{nil, ""},
		} {
			_, d := demo(t, tc.set...)
			sc, _, _ := Sidecar(&d.Spec.Template.Spec)
			if v, ok := FlagValue(sc.Args, "drain-timeout"); v != tc.want || ok != (tc.want != "") {
				t.Errorf("%v: --drain-timeout = %q (%v), want %q", tc.set, v, ok, tc.want)
			}
			// In partition mode a rollout goes a pod at a time, so that
			// one pod's partitions move at a time (leader mode's
			// strategy would replace every pod at once).
			if want := candidateStrategy; tc.set != nil && !equality.Semantic.DeepEqual(d.Spec.Strategy, want) {
				t.Errorf("%v: strategy %s, want %s", tc.set, asJSON(d.Spec.Strategy), asJSON(want))
			}
			if !binaryVerdict(t, sc.Args) {
				t.Errorf("leader-elector refuses the chart's arguments %v", sc.Args)
			}
		}
	})
	// election.advertisePort: the flag, and $POD_IP from the downward API
	// for its host; leader-elector accepts them with a pod IP.
	t.Run("advertise port", func(t *testing.T) {
		_, d := demo(t, "--set", "election.advertisePort=8080")
		sc, _, _ := Sidecar(&d.Spec.Template.Spec)
		if port, ok := FlagValue(sc.Args, "advertise-port"); !ok || port != "8080" {
			t.Errorf("--advertise-port = %q (%v), want 8080", port, ok)
		}
		podIP := false
		for _, e := range sc.Env {
			podIP = podIP || (e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP")
		}
		if !podIP {
			t.Errorf("the sidecar has no POD_IP from status.podIP: %s", asJSON(sc.Env))
		}
		if !binaryVerdict(t, append(sc.Args, "--advertise-address=10.0.0.7")) {
			t.Errorf("leader-elector refuses the chart's arguments %v with a pod IP", sc.Args)
		}
		_, d = demo(t)
		if sc, _, _ := Sidecar(&d.Spec.Template.Spec); slices.ContainsFunc(sc.Args, func(a string) bool { return strings.HasPrefix(a, "--advertise-port") }) {
			t.Errorf("the default renders --advertise-port: %v", sc.Args)
		}
	})
	t.Run("image digest", func(t *testing.T) {
		digest := "sha256:" + strings.Repeat("ab", 32)
		_, d := demo(t, "--set", "image.digest="+digest)
		sc, _, _ := Sidecar(&d.Spec.Template.Spec)
		if want := TestImageRepository + "@" + digest; sc.Image != want {
			t.Errorf("image %q, want %q", sc.Image, want)
		}
	})
}

var (
	hundredPercent = intstr.FromString("100%")
	zero           = intstr.FromInt32(0)
	one            = intstr.FromInt32(1)
	// With readiness leader, only the leader is ever available: a rollout
	// must not wait for availability.
	leaderStrategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &zero, MaxUnavailable: &hundredPercent}}
	// With readiness candidate, every running sidecar is Ready: one by one.
	candidateStrategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &zero}}
)

// checkWiring checks that the workload, its sidecar and the RBAC objects
// name each other: the pod runs as the ServiceAccount the Role is bound to,
// the sidecar elects on the Lease the Role names, a Service selects the pods
// and targets the app's port.
func checkWiring(t *testing.T, objs Objects, d *appsv1.Deployment) {
	t.Helper()
	var (
		sa    corev1.ServiceAccount
		role  rbacv1.Role
		lease coordinationv1.Lease
	)
	for kind, into := range map[string]any{"ServiceAccount": &sa, "Role": &role, "Lease": &lease} {
		if err := objs.OneInto(kind, into); err != nil {
			t.Fatal(err)
		}
	}
	spec := &d.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("pod runs as %q, the ServiceAccount is %q", spec.ServiceAccountName, sa.Name)
	}
	sc, _, err := Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	leaseName, ok := FlagValue(sc.Args, "lease-name")
	if !ok {
		leaseName, ok = EnvValue(sc, "LEADER_ELECTOR_LEASE_NAME")
	}
	if !ok || leaseName != lease.Name {
		t.Errorf("sidecar elects on %q, the Lease is %q", leaseName, lease.Name)
	}
	if !slices.Equal(role.Rules[0].ResourceNames, []string{lease.Name}) {
		t.Errorf("the Role names %v, the Lease is %q", role.Rules[0].ResourceNames, lease.Name)
	}
	var svc corev1.Service
	if err := objs.OneInto("Service", &svc); err != nil {
		t.Fatal(err)
	}
	for k, v := range svc.Spec.Selector {
		// The leader label and the group label (the Lease's name) are set
		// on the pod by the sidecar (--route=label).
		if k == routing.DefaultLeaderLabel || (k == routing.GroupLabel && v == lease.Name) {
			continue
		}
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not match the pod labels %v", k, v, d.Spec.Template.Labels)
		}
	}
	for _, p := range svc.Spec.Ports {
		found := false
		for _, c := range spec.Containers {
			for _, cp := range c.Ports {
				found = found || (c.Name != SidecarName && (cp.Name == p.TargetPort.String() || cp.ContainerPort == p.TargetPort.IntVal))
			}
		}
		if !found {
			t.Errorf("Service port %s targets %q, which no app container has", p.Name, p.TargetPort.String())
		}
	}
}

// TestChartGuards: impossible values fail the install with a message that
// names the value, and the chart's timing rules are exactly the sidecar's:
// for each set of timings, the chart renders iff leader-elector accepts it.
func TestChartGuards(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"lease duration not above renew deadline", []string{"--set", "election.renewDeadlineSeconds=15"}, "must be greater than election.renewDeadlineSeconds"},
		{"proxy drain not below the renew deadline", []string{"--set", "proxy.enabled=true", "--set", "proxy.upstreamPort=8081", "--set", "proxy.drainSeconds=10"}, "proxy.drainSeconds (10) must be shorter than election.renewDeadlineSeconds (10)"},
		{"renew deadline not above 1.2 × retry period", []string{"--set", "election.retryPeriodSeconds=9", "--set", "election.leaseDurationSeconds=20"}, "1.2 × election.retryPeriodSeconds"},
		{"lease duration in fractions", []string{"--set-json", "election.leaseDurationSeconds=15.5"}, "election/leaseDurationSeconds"},
		{"zero retry period", []string{"--set-json", "election.retryPeriodSeconds=0"}, "election/retryPeriodSeconds"},
		{"unknown readiness", []string{"--set", "election.readiness=sometimes"}, "election/readiness"},
		{"unknown log format", []string{"--set", "sidecar.logFormat=xml"}, "sidecar/logFormat"},
		{"same port twice", []string{"--set", "sidecar.httpPort=8080"}, "sidecar.httpPort and sidecar.probePort must differ"},
		{"invalid Lease name", []string{"--set", "lease.name=My_Lease"}, "lease/name"},
		{"a misspelt value", []string{"--set", "election.leaseDuration=30s"}, "leaseDuration"},
		{"existing ServiceAccount without a name", []string{"--set", "serviceAccount.create=false"}, "serviceAccount.name is required"},
		{"too many partitions", []string{"--set", "partitions.count=2000"}, "partitions/count"},
		{"partition group name too long for a label", []string{"--set", "partitions.count=4", "--set", "demo.enabled=true", "--set", "lease.name=" + strings.Repeat("a", 64)}, "partitions.count needs a lease name of at most 63 characters"},
		{"Kubernetes 1.29, older than supported", []string{"--kube-version", "1.29.15", "--set", "sidecar.native=false"}, "supports Kubernetes 1.30 or later"},
		{"unknown campaign", []string{"--set", "election.campaign=never"}, "election/campaign"},
		{"manual campaign with partitions", []string{"--set", "election.campaign=manual", "--set", "partitions.count=4"}, "election.campaign=manual is for leader election"},
		{"observer with partitions", []string{"--set", "election.candidate=false", "--set", "partitions.count=4", "--set", "election.readiness=candidate"}, "election.candidate=false is for leader election"},
		{"observer with manual campaign", []string{"--set", "election.candidate=false", "--set", "election.campaign=manual", "--set", "election.readiness=candidate", "--set", "lease.create=false"}, "give one of them"},
		{"observer with leader readiness", []string{"--set", "election.candidate=false", "--set", "lease.create=false"}, "election.readiness=leader would never pass"},
		{"observer with routing", []string{"--set", "election.candidate=false", "--set", "election.readiness=candidate", "--set", "lease.create=false", "--set", "routing.mode=label"}, "observers (election.candidate=false) never lead"},
		{"observer creating the Lease", []string{"--set", "election.candidate=false", "--set", "election.readiness=candidate"}, "set lease.create=false"},
		{"observer with health gating", []string{"--set", "election.candidate=false", "--set", "election.readiness=candidate", "--set", "lease.create=false", "--set", "healthGating.enabled=true", "--set", "healthGating.url=http://127.0.0.1:8081/healthz"}, "healthGating gates a pod's candidacy"},
		{"observer advertising", []string{"--set", "election.candidate=false", "--set", "election.readiness=candidate", "--set", "lease.create=false", "--set", "election.advertisePort=8081"}, "observers (election.candidate=false) never lead"},
		{"advertise port out of range", []string{"--set", "election.advertisePort=65536"}, "election/advertisePort"},
		{"advertise port with partitions", []string{"--set", "partitions.count=4", "--set", "demo.enabled=true", "--set", "election.advertisePort=8080"}, "election.advertisePort publishes one leader's address"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage(tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
	t.Run("the oldest supported release renders, with either sidecar", func(t *testing.T) {
		if _, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage("--kube-version", "1.30.0", "--set", "demo.enabled=true")...); err != nil {
			t.Error(err)
		}
		if _, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage("--kube-version", "1.30.0", "--set", "sidecar.native=false", "--set", "demo.enabled=true")...); err != nil {
			t.Error(err)
		}
	})

	// The chart's guard against the sidecar's own verdict, which applies the
	// timing rules (leasetimings.Timings.Check) and the supported ranges
	// (options): the edges of every rule, on both sides.
	timings := []struct{ lease, renew, retry string }{
		{"15", "10", "2"}, {"4", "2", "0.5"}, {"15", "15", "2"}, {"10", "15", "2"},
		{"15", "10", "8"}, {"15", "10", "9"}, {"3", "2", "1"}, {"2", "1.2", "1"}, {"2", "1.3", "1"},
		// The supported ranges (issue 11): lease 2..86400, renew ≥ 1, retry ≥ 0.1.
		{"86400", "10", "2"}, {"86401", "10", "2"}, {"2", "1", "0.1"}, {"2", "1", "0.09"},
		{"1", "0.5", "0.1"}, {"15", "0.9", "0.5"}, {"3600", "1800", "1000"},
		// The margin, leasetimings.MinMargin: at least 1 s, 1% of the lease and
		// the retry period.
		{"15", "12", "3"}, {"15", "12", "3.5"}, {"86400", "85536", "60"}, {"2", "1.01", "0.1"}, {"15", "14.99", "0.1"}, {"15", "14", "2"}, {"200", "198", "2"},
		{"200", "198.1", "2"}, {"86400", "85536", "3600"}, {"86400", "85537", "3600"},
	}
	for _, tm := range timings {
		t.Run(fmt.Sprintf("timings %s/%s/%s", tm.lease, tm.renew, tm.retry), func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage("--set-json",
				fmt.Sprintf("election={\"leaseDurationSeconds\":%s,\"renewDeadlineSeconds\":%s,\"retryPeriodSeconds\":%s}", tm.lease, tm.renew, tm.retry))...)
			chartAccepts := err == nil
			binaryAccepts := binaryVerdict(t, []string{"--lease-name=x", "--lease-duration=" + tm.lease + "s", "--renew-deadline=" + tm.renew + "s", "--retry-period=" + tm.retry + "s"})
			if chartAccepts != binaryAccepts {
				t.Errorf("the chart accepts: %v (%v); leader-elector accepts: %v", chartAccepts, err, binaryAccepts)
			}
		})
	}

	// The drain timeout's range.
	for _, v := range []string{"-1", "0", "0.5", "600", "600.5", "601"} {
		t.Run("drain timeout "+v, func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage("--set", "partitions.count=4", "--set", "demo.enabled=true", "--set-json", "partitions.drainTimeoutSeconds="+v)...)
			chartAccepts := err == nil
			binaryAccepts := binaryVerdict(t, []string{"--lease-name=x", "--partitions=4", "--drain-timeout=" + v + "s"})
			if chartAccepts != binaryAccepts {
				t.Errorf("the chart accepts: %v (%v); leader-elector accepts: %v", chartAccepts, err, binaryAccepts)
			}
		})
	}

	// Partition mode's derived client rate: (count + 1) / retry period at
	// most 1000 per second, unless --kube-api-qps is given.
	rates := []struct {
		count, retry string
		extra        []string
	}{
		{"1024", "2", nil}, {"1024", "1", nil}, {"999", "1", nil}, {"1000", "1", nil},
		{"1024", "1", []string{"--kube-api-qps=3000"}}, {"1024", "1", []string{"--kube-api-qps=0"}},
	}
	for _, r := range rates {
		t.Run(fmt.Sprintf("partitions %s at retry %s %v", r.count, r.retry, r.extra), func(t *testing.T) {
			args := []string{"--set", "partitions.count=" + r.count, "--set", "demo.enabled=true", "--set-json",
				fmt.Sprintf("election={\"leaseDurationSeconds\":4,\"renewDeadlineSeconds\":2,\"retryPeriodSeconds\":%s}", r.retry)}
			for i, a := range r.extra {
				args = append(args, "--set", fmt.Sprintf("sidecar.extraArgs[%d]=%s", i, a))
			}
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage(args...)...)
			chartAccepts := err == nil
			binaryAccepts := binaryVerdict(t, append([]string{"--lease-name=x", "--partitions=" + r.count, "--lease-duration=4s", "--renew-deadline=2s", "--retry-period=" + r.retry + "s"}, r.extra...))
			if chartAccepts != binaryAccepts {
				t.Errorf("the chart accepts: %v (%v); leader-elector accepts: %v", chartAccepts, err, binaryAccepts)
			}
		})
	}
}

// TestChartLint runs helm lint --strict on the main combinations of values.
func TestChartLint(t *testing.T) {
	kv, err := KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	for _, set := range [][]string{
		nil,
		{"--set", "demo.enabled=true"},
		{"--set", "demo.enabled=true", "--set", "sidecar.native=false", "--set", "election.readiness=candidate"},
		{"--set", "lease.create=false", "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=x"},
		{"--set", "demo.enabled=true", "--set", "election.readiness=candidate", "--set", "routing.mode=endpointslice"},
		{"--set", "demo.enabled=true", "--set", "election.readiness=candidate", "--set", "routing.mode=label"},
	} {
		args := append([]string{"lint", "--strict", "--kube-version", kv, ChartDir()}, set...)
		if out, err := Run(context.Background(), "helm", args...); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	}
}

// userChart copies the user's chart (testdata/my-app) into a temporary
// directory with this chart as its dependency, as `helm dependency build`
// does for a file:// dependency, and returns its path.
func userChart(t *testing.T) string {
	t.Helper()
	app := filepath.Join(t.TempDir(), "my-app")
	if err := os.CopyFS(app, os.DirFS("testdata/my-app")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(filepath.Join(app, "charts", "leader-elector"), os.DirFS(ChartDir())); err != nil {
		t.Fatal(err)
	}
	return app
}

// TestChartAsDependency renders a user's chart (testdata/my-app) that adds
// the sidecar to its own Deployment with the chart's named templates.
func TestChartAsDependency(t *testing.T) {
	app := userChart(t)
	for _, tc := range []struct {
		name   string
		set    []string
		native bool
	}{
		{"native sidecar", nil, true},
		{"ordinary container", []string{"--set", "leader-elector.sidecar.native=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := HelmTemplate(context.Background(), app, "rel", "apps", tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			var d appsv1.Deployment
			if err := objs.OneInto("Deployment", &d); err != nil {
				t.Fatal(err)
			}
			spec := &d.Spec.Template.Spec
			errs := CheckSidecarPod(spec, tc.native)
			// The app container is the user's: only the sidecar's own
			// settings are the chart's business here.
			for _, err := range errs {
				if !strings.Contains(err.Error(), "container app:") && !strings.Contains(err.Error(), "container app has") {
					t.Error(err)
				}
			}
			var role rbacv1.Role
			if err := objs.OneInto("Role", &role); err != nil {
				t.Fatal(err)
			}
			sc, _, _ := Sidecar(spec)
			if v, _ := FlagValue(sc.Args, "lease-name"); v != "my-app" || !slices.Equal(role.Rules[0].ResourceNames, []string{"my-app"}) {
				t.Errorf("sidecar elects on %q, Role names %v; want my-app (the user's value)", v, role.Rules[0].ResourceNames)
			}
			if spec.ServiceAccountName != "rel-leader-elector" {
				t.Errorf("serviceAccountName %q, want rel-leader-elector", spec.ServiceAccountName)
			}
			if !equality.Semantic.DeepEqual(d.Spec.Strategy, candidateStrategy) {
				t.Errorf("strategy %s, want the one for readiness candidate", asJSON(d.Spec.Strategy))
			}
		})
	}
}

// TestChartValuesDocumented: every value in values.yaml carries a helm-docs
// `# --` comment (on itself or on the object holding it) and is in
// values.schema.json.
func TestChartValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ChartDir(), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	sb, err := os.ReadFile(filepath.Join(ChartDir(), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(sb, &schema); err != nil {
		t.Fatal(err)
	}
	keyLine := regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*):(.*)$`)
	type entry struct {
		indent     int
		path       string
		documented bool
	}
	var (
		stack   []entry
		pending bool // a `# --` comment waits for its key
		leaves  int
	)
	lines := strings.Split(string(b), "\n")
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "# --") {
			pending = true
			continue
		}
		if strings.HasPrefix(trimmed, "#") || trimmed == "" || strings.HasPrefix(trimmed, "- ") {
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		e := entry{indent: indent, path: m[2], documented: pending}
		if len(stack) > 0 {
			parent := stack[len(stack)-1]
			e.path = parent.path + "." + m[2]
			e.documented = e.documented || parent.documented
		}
		pending = false
		stack = append(stack, e)
		// A leaf has a value on its line, or its next key is not nested.
		value := strings.TrimSpace(m[3])
		isLeaf := value != ""
		if !isLeaf {
			for _, next := range lines[i+1:] {
				nt := strings.TrimSpace(next)
				if nt == "" || strings.HasPrefix(nt, "#") {
					continue
				}
				isLeaf = len(next)-len(strings.TrimLeft(next, " ")) <= indent
				break
			}
		}
		if !isLeaf {
			continue
		}
		leaves++
		if !e.documented {
			t.Errorf("values.yaml: %s has no `# --` comment", e.path)
		}
		top, _, _ := strings.Cut(e.path, ".")
		if _, ok := schema.Properties[top]; !ok {
			t.Errorf("values.schema.json has no property %q", top)
		}
	}
	if leaves < 30 {
		t.Errorf("found only %d values in values.yaml: the parser is broken", leaves)
	}
}

// TestChartEventsMatchTheRole: the sidecar records Events exactly when the
// Role lets it (election.events), and never in partition mode, which
// records none.
func TestChartEventsMatchTheRole(t *testing.T) {
	for _, tc := range []struct {
		set        []string
		arg        string // --events value; "" for none
		eventsRule bool
	}{
		{nil, "true", true},
		{[]string{"--set", "election.events=false"}, "false", false},
		{[]string{"--set", "partitions.count=4"}, "", false},
	} {
		t.Run(strings.Join(tc.set, " "), func(t *testing.T) {
			objs := helmTemplate(t, append([]string{"--set", "demo.enabled=true"}, tc.set...)...)
			var d appsv1.Deployment
			if err := objs.OneInto("Deployment", &d); err != nil {
				t.Fatal(err)
			}
			sc, _, err := Sidecar(&d.Spec.Template.Spec)
			if err != nil {
				t.Fatal(err)
			}
			if v, _ := FlagValue(sc.Args, "events"); v != tc.arg {
				t.Errorf("--events=%q, want %q", v, tc.arg)
			}
			var role rbacv1.Role
			if err := objs.OneInto("Role", &role); err != nil {
				t.Fatal(err)
			}
			if got := slices.ContainsFunc(role.Rules, func(r rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(r, eventsRule) }); got != tc.eventsRule {
				t.Errorf("the Role grants Events: %v, want %v (rules %s)", got, tc.eventsRule, asJSON(role.Rules))
			}
		})
	}
}
