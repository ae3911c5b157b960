//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestMonitoringCRDs installs the Prometheus Operator's published CRDs of
// PodMonitor, ServiceMonitor and PrometheusRule (packaging.OperatorModule)
// on the real API server, then `helm install`s the chart with all three
// enabled and applies manifests/components/monitoring (with
// manifests/example): the API server validates each object against the
// CRD's schema, strictly, so a field the Operator does not know fails.
func TestMonitoringCRDs(t *testing.T) {
	ctx := context.Background()
	crds, err := packaging.OperatorCRDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(crds.OfKind("CustomResourceDefinition")); got != 3 {
		t.Fatalf("%d CRDs from %s, want 3", got, packaging.OperatorModule)
	}
	applyServerSide(t, crds)

	// A PodMonitor with a field the schema lacks is refused: the CRDs do
	// validate (and the API server has established them).
	bogus := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
		"metadata": map[string]any{"name": "bogus", "namespace": "default"},
		"spec":     map[string]any{"selector": map[string]any{}, "podMetricsEndpoints": []any{map[string]any{"port": "x", "bogusField": true}}},
	}}
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, giveUp, true, func(ctx context.Context) (bool, error) {
		lastErr = packaging.DryRunApply(ctx, controlPlane.AdminConfig(), packaging.Objects{bogus})
		return lastErr != nil && strings.Contains(lastErr.Error(), "bogusField"), nil
	}); err != nil {
		t.Fatalf("a PodMonitor with an unknown field: %v, want refused by the CRD's schema", lastErr)
	}

	const namespace, release = "monitoring-e2e", "mon"
	restrictedNamespace(t, namespace)
	args := append([]string{"install", release, packaging.ChartDir(), "--kubeconfig", controlPlane.AdminKubeconfig(), "--namespace", namespace},
		packaging.WithImage("--set", "demo.enabled=true", "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true")...)
	out, err := packaging.Run(ctx, "helm", args...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "STATUS: deployed") {
		t.Errorf("helm install printed:\n%s", out)
	}
	for _, kind := range []string{"podmonitors", "servicemonitors", "prometheusrules"} {
		list, err := packaging.List(ctx, controlPlane.AdminConfig(), "monitoring.coreos.com", "v1", kind, namespace)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 {
			t.Errorf("%d %s in %s after helm install, want 1", len(list), kind, namespace)
		}
	}

	objs, err := packaging.KustomizeBuild(ctx, packaging.TestdataDir("monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
}
