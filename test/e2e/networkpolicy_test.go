//go:build integration

package e2e

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestNetworkPolicyAccepted: the API server accepts the NetworkPolicies the
// chart (networkPolicy.enabled, with every kind of peer) and the kustomize
// component render, with strict field validation. Whether a network plugin
// enforces them is beyond this control plane, which has none.
func TestNetworkPolicyAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const namespace = "network-policy"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fromChart, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), "np", namespace,
		packaging.WithImage("--set", "demo.enabled=true", "--set", "networkPolicy.enabled=true",
			"--set-json", `networkPolicy.nodeCIDRs=["10.0.0.0/16","fd00::/64"]`)...)
	if err != nil {
		t.Fatal(err)
	}
	fromKustomize, err := packaging.KustomizeBuild(ctx, filepath.Join(repoRoot, "test", "packaging", "testdata", "networkpolicy"))
	if err != nil {
		t.Fatal(err)
	}
	policies := append(fromChart.OfKind("NetworkPolicy"), fromKustomize.OfKind("NetworkPolicy")...)
	if len(policies) != 2 {
		t.Fatalf("rendered %d NetworkPolicies, want one from the chart and one from the component", len(policies))
	}
	if err := packaging.InNamespace(policies, namespace); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, policies)
	for _, p := range policies {
		got, err := controlPlane.AdminClient().NetworkingV1().NetworkPolicies(namespace).Get(ctx, p.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.PodSelector.MatchLabels) == 0 || len(got.Spec.Ingress) == 0 {
			t.Errorf("NetworkPolicy %s as stored: %+v", got.Name, got.Spec)
		}
	}
}
