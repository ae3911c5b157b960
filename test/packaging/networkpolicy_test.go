//go:build integration

package packaging

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// prometheusPeer is who may scrape /metrics by default: the Prometheus
// Operator's Prometheus pods in namespace monitoring.
var prometheusPeer = networkingv1.NetworkPolicyPeer{
	NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
	PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "prometheus"}},
}

// checkNetworkPolicy checks np against the workload d: it selects d's pods
// (and, if other is given, not other's), isolates their ingress and no
// more, admits to the sidecar's probe port exactly probesFrom (no rule at
// all if probesFrom is empty: a rule without `from` admits everyone), and
// admits each of the app's own container ports from anywhere.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, d *appsv1.Deployment, probesFrom []networkingv1.NetworkPolicyPeer) {
	t.Helper()
	selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		t.Fatalf("NetworkPolicy %s: podSelector: %v", np.Name, err)
	}
	if selector.Empty() {
		t.Fatalf("NetworkPolicy %s selects every pod of its namespace", np.Name)
	}
	if !selector.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy %s (podSelector %s) does not select the pods of %s (labels %v)", np.Name, selector, d.Name, d.Spec.Template.Labels)
	}
	if np.Namespace != d.Namespace {
		t.Errorf("NetworkPolicy %s is in namespace %q, the pods in %q", np.Name, np.Namespace, d.Namespace)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy %s: policyTypes %v, want [Ingress] (egress untouched)", np.Name, np.Spec.PolicyTypes)
	}

	spec := &d.Spec.Template.Spec
	sc, _, err := Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	var probePort int32
	for _, p := range sc.Ports {
		if p.Name == "elector-probes" {
			probePort = p.ContainerPort
		}
	}
	if probePort == 0 {
		t.Fatalf("the sidecar has no port named elector-probes: %v", sc.Ports)
	}
	var gotFrom []networkingv1.NetworkPolicyPeer
	for i, rule := range np.Spec.Ingress {
		if !admitsPort(rule, probePort) {
			continue
		}
		if len(rule.From) == 0 {
			t.Errorf("NetworkPolicy %s: ingress rule %d admits the probe port %d from everywhere: %s", np.Name, i, probePort, asJSON(rule))
		}
		gotFrom = append(gotFrom, rule.From...)
	}
	if !equality.Semantic.DeepEqual(gotFrom, probesFrom) && (len(gotFrom) != 0 || len(probesFrom) != 0) {
		t.Errorf("NetworkPolicy %s admits to the probe port %d:\n%s\nwant exactly:\n%s", np.Name, probePort, asJSON(gotFrom), asJSON(probesFrom))
	}

	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		if c.Name == SidecarName {
			continue
		}
		for _, p := range c.Ports {
			if !slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
				return len(r.From) == 0 && admitsPort(r, p.ContainerPort)
			}) {
				t.Errorf("NetworkPolicy %s blocks the app's own port %s (%d) of container %s", np.Name, p.Name, p.ContainerPort, c.Name)
			}
		}
	}
}

// admitsPort reports whether rule admits TCP port (a rule without ports
// admits every port).
func admitsPort(rule networkingv1.NetworkPolicyIngressRule, port int32) bool {
	if len(rule.Ports) == 0 {
		return true
	}
	return slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool {
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			return false
		}
		if p.Port == nil {
			return true
		}
		if p.Port.Type != intstr.Int {
			return false // named ports are not used here
		}
		end := p.Port.IntVal
		if p.EndPort != nil {
			end = *p.EndPort
		}
		return p.Port.IntVal <= port && port <= end
	})
}

func networkPolicy(t *testing.T, objs Objects) *networkingv1.NetworkPolicy {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := objs.OneInto("NetworkPolicy", &np); err != nil {
		t.Fatal(err)
	}
	return &np
}

// TestChartNetworkPolicy: networkPolicy.enabled renders one NetworkPolicy
// that selects the sidecar's pods, admits to the probe port only who the
// values name, and leaves the app's own ports open as the values say.
func TestChartNetworkPolicy(t *testing.T) {
	t.Run("off by default", func(t *testing.T) {
		for _, set := range [][]string{nil, {"--set", "demo.enabled=true"}} {
			if n := len(helmTemplate(t, set...).OfKind("NetworkPolicy")); n != 0 {
				t.Errorf("helm template %v renders %d NetworkPolicies, want none", set, n)
			}
		}
	})
	nodes := []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/16"}},
		{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/64"}},
	}
	for _, tc := range []struct {
		name       string
		set        []string
		probesFrom []networkingv1.NetworkPolicyPeer
	}{
		{"demo, defaults", nil, []networkingv1.NetworkPolicyPeer{prometheusPeer}},
		{"demo, node CIDRs", []string{"--set-json", `networkPolicy.nodeCIDRs=["10.0.0.0/16","fd00::/64"]`}, append([]networkingv1.NetworkPolicyPeer{prometheusPeer}, nodes...)},
		{"demo, another probe port", []string{"--set", "sidecar.probePort=9090"}, []networkingv1.NetworkPolicyPeer{prometheusPeer}},
		{"demo, no one but the node", []string{"--set-json", "networkPolicy.metricsFrom=[]"}, nil},
		{"demo, routed by label", []string{"--set", "election.readiness=candidate", "--set", "routing.mode=label"}, []networkingv1.NetworkPolicyPeer{prometheusPeer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, d := demo(t, append([]string{"--set", "networkPolicy.enabled=true"}, tc.set...)...)
			np := networkPolicy(t, objs)
			checkNetworkPolicy(t, np, d, tc.probesFrom)
			if !equality.Semantic.DeepEqual(np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("podSelector %v, want the demo Deployment's selector %v", np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels)
			}
			if tc.probesFrom == nil && len(np.Spec.Ingress) != 1 {
				t.Errorf("with no one but the node allowed to the probe port, want only the demo's rule: %s", asJSON(np.Spec.Ingress))
			}
		})
	}
}

// TestChartNetworkPolicyInYourChart: in a chart that depends on this one,
// the policy selects the user's pods and admits the user's ingress rules.
func TestChartNetworkPolicyInYourChart(t *testing.T) {
	app := userChart(t)
	for _, tc := range []struct {
		name      string
		set       []string
		wantRules int
	}{
		{"the app's port", []string{"--set-json", `leader-elector.networkPolicy.appIngress=[{"ports":[{"port":8443}]}]`}, 2},
		{"nothing connects to the app", []string{"--set-json", "leader-elector.networkPolicy.appIngress=[]"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := HelmTemplate(context.Background(), app, "rel", "apps", append([]string{
				"--set", "leader-elector.networkPolicy.enabled=true",
				"--set", "leader-elector.networkPolicy.podSelector.app=my-app",
			}, tc.set...)...)
			if err != nil {
				t.Fatal(err)
			}
			var d appsv1.Deployment
			if err := objs.OneInto("Deployment", &d); err != nil {
				t.Fatal(err)
			}
			d.Namespace = "apps" // the user's template leaves it to helm
			np := networkPolicy(t, objs)
			checkNetworkPolicy(t, np, &d, []networkingv1.NetworkPolicyPeer{prometheusPeer})
			if len(np.Spec.Ingress) != tc.wantRules {
				t.Errorf("ingress rules %s, want %d", asJSON(np.Spec.Ingress), tc.wantRules)
			}
			if tc.wantRules == 2 && !admitsPort(np.Spec.Ingress[1], 8443) {
				t.Errorf("the user's rule is not there: %s", asJSON(np.Spec.Ingress))
			}
		})
	}
}

// TestChartNetworkPolicyGuards: values that would isolate pods nobody meant
// to, or cut the app's own traffic unasked, fail the install.
func TestChartNetworkPolicyGuards(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no pods named", []string{"--set", "networkPolicy.enabled=true", "--set-json", "networkPolicy.appIngress=[]"}, "networkPolicy.podSelector"},
		{"the app's ports not said", []string{"--set", "networkPolicy.enabled=true", "--set", "networkPolicy.podSelector.app=x"}, "networkPolicy.appIngress"},
		{"a peer with nothing in it", []string{"--set", "networkPolicy.enabled=true", "--set", "demo.enabled=true", "--set-json", "networkPolicy.metricsFrom=[{}]"}, "metricsFrom"},
		{"a misspelt value", []string{"--set", "networkPolicy.enable=true"}, "enable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, WithImage(tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template %v: %v, want an error with %q", tc.args, err, tc.want)
			}
		})
	}
	kv, err := KubeVersion()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"lint", "--strict", "--kube-version", kv, ChartDir(), "--set", "demo.enabled=true", "--set", "networkPolicy.enabled=true"}
	if out, err := Run(context.Background(), "helm", args...); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}

// TestKustomizeNetworkPolicy: the networkpolicy component, in an overlay of
// the example that adds the app's port (testdata/networkpolicy), selects
// the example's pods by the Deployment's selector, admits Prometheus to the
// probe port, and the app's port from anywhere.
func TestKustomizeNetworkPolicy(t *testing.T) {
	objs, err := KustomizeBuild(context.Background(), inRepo("test", "packaging", "testdata", "networkpolicy"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	np := networkPolicy(t, objs)
	checkNetworkPolicy(t, np, &d, []networkingv1.NetworkPolicyPeer{prometheusPeer})
	if !equality.Semantic.DeepEqual(np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
		t.Errorf("podSelector %v, want the Deployment's selector %v", np.Spec.PodSelector.MatchLabels, d.Spec.Selector.MatchLabels)
	}
	// The rest of the example is untouched.
	example, _ := kustomize(t, "example")
	if got, want := objs.Kinds(), append(example.Kinds(), "NetworkPolicy/leader-elector"); !sameElements(got, want) {
		t.Errorf("objects %v, want the example's and the NetworkPolicy: %v", got, want)
	}
}
