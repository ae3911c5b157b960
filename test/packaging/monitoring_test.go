//go:build integration

package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// ruleGroups reads the one source of the alert rules, as Prometheus loads it.
func ruleGroups(t *testing.T) any {
	t.Helper()
	b, err := os.ReadFile(inRepo("deploy", "prometheus", "leader-elector-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	if file["groups"] == nil {
		t.Fatal("deploy/prometheus/leader-elector-rules.yaml has no groups")
	}
	return file["groups"]
}

// TestMonitoringCopiesCurrent: the chart's and the kustomize component's
// copies of the alert rules are what hack/monitoring-generate.sh makes of
// deploy/prometheus/leader-elector-rules.yaml, so the three cannot drift.
func TestMonitoringCopiesCurrent(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"deploy/prometheus", "charts/leader-elector/files", "manifests/components/monitoring"} {
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.ReadFile(inRepo("deploy", "prometheus", "leader-elector-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "deploy", "prometheus", "leader-elector-rules.yaml"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", inRepo("hack", "monitoring-generate.sh"), dir).CombinedOutput(); err != nil {
		t.Fatalf("hack/monitoring-generate.sh: %v\n%s", err, out)
	}
	for _, p := range []string{"charts/leader-elector/files/leader-elector-rules.yaml", "manifests/components/monitoring/prometheusrule.yaml"} {
		want, err := os.ReadFile(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(inRepo(p))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale: run `make monitoring-generate` and commit the result", p)
		}
	}
}

// TestChartMonitoring renders the chart's PodMonitor, ServiceMonitor (with
// its Service) and PrometheusRule: off by default; when on, they scrape the
// sidecar's named probe port on the demo's pods, and the PrometheusRule's
// spec is exactly the rule file's groups.
func TestChartMonitoring(t *testing.T) {
	if got := helmTemplate(t, "--set", "demo.enabled=true"); len(got.OfKind("PodMonitor"))+len(got.OfKind("ServiceMonitor"))+len(got.OfKind("PrometheusRule")) != 0 {
		t.Errorf("monitoring objects rendered by default: %v", got.Kinds())
	}
	objs, d := demo(t, "--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
		"--set", "metrics.prometheusRule.enabled=true", "--set", "metrics.prometheusRule.labels.release=kube-prometheus")
	podLabels := d.Spec.Template.Labels
	sidecar, _, err := Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	probePort := ""
	for _, p := range sidecar.Ports {
		if p.ContainerPort == 8080 {
			probePort = p.Name
		}
	}
	if probePort == "" {
		t.Fatalf("the sidecar has no named port 8080: %+v", sidecar.Ports)
	}

	pm, err := objs.One("PodMonitor")
	if err != nil {
		t.Fatal(err)
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if !selects(sel, podLabels) {
		t.Errorf("PodMonitor selector %v does not select the demo's pods %v", sel, podLabels)
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != probePort || eps[0].(map[string]any)["path"] != "/metrics" {
		t.Errorf("PodMonitor endpoints %v, want port %s path /metrics", eps, probePort)
	}

	sm, err := objs.One("ServiceMonitor")
	if err != nil {
		t.Fatal(err)
	}
	var svc map[string]any
	for _, s := range objs.OfKind("Service") {
		smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if selects(smSel, s.GetLabels()) {
			if svc != nil {
				t.Errorf("the ServiceMonitor selects more than one Service")
			}
			svc = s.Object
		}
	}
	if svc == nil {
		t.Fatal("the ServiceMonitor selects no Service")
	}
	svcSel, _, _ := unstructured.NestedStringMap(svc, "spec", "selector")
	if !selects(svcSel, podLabels) {
		t.Errorf("metrics Service selector %v does not select the demo's pods %v", svcSel, podLabels)
	}
	if v, _, _ := unstructured.NestedBool(svc, "spec", "publishNotReadyAddresses"); !v {
		t.Errorf("metrics Service does not publish not-ready addresses: followers would not be scraped")
	}
	ports, _, _ := unstructured.NestedSlice(svc, "spec", "ports")
	smEps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(ports) != 1 || ports[0].(map[string]any)["targetPort"] != probePort || len(smEps) != 1 || smEps[0].(map[string]any)["port"] != ports[0].(map[string]any)["name"] {
		t.Errorf("metrics Service ports %v and ServiceMonitor endpoints %v do not lead to port %s", ports, smEps, probePort)
	}

	pr, err := objs.One("PrometheusRule")
	if err != nil {
		t.Fatal(err)
	}
	if pr.GetLabels()["release"] != "kube-prometheus" {
		t.Errorf("PrometheusRule labels %v lack metrics.prometheusRule.labels", pr.GetLabels())
	}
	if groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups"); !reflect.DeepEqual(any(groups), ruleGroups(t)) {
		t.Errorf("the chart's PrometheusRule groups differ from deploy/prometheus/leader-elector-rules.yaml")
	}

	if _, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, "--set", "metrics.podMonitor.enabled=true"); err == nil {
		t.Errorf("metrics.podMonitor.enabled without a pod selector (and no demo) renders; want a clear failure")
	}
}

// TestKustomizeMonitoring: the component adds a PodMonitor that scrapes the
// example's sidecars and the PrometheusRule with the rule file's groups.
func TestKustomizeMonitoring(t *testing.T) {
	objs, err := KustomizeBuild(context.Background(), inRepo("test", "packaging", "testdata", "monitoring"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.OfKind("Deployment")) != 1 {
		t.Fatalf("objects %v, want the example's Deployment", objs.Kinds())
	}
	pm, err := objs.One("PodMonitor")
	if err != nil {
		t.Fatal(err)
	}
	if pm.GetNamespace() != exampleNamespace {
		t.Errorf("PodMonitor in namespace %q, want %q", pm.GetNamespace(), exampleNamespace)
	}
	eps, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "elector-probes" {
		t.Errorf("PodMonitor endpoints %v, want port elector-probes", eps)
	}
	pr, err := objs.One("PrometheusRule")
	if err != nil {
		t.Fatal(err)
	}
	if groups, _, _ := unstructured.NestedSlice(pr.Object, "spec", "groups"); !reflect.DeepEqual(any(groups), ruleGroups(t)) {
		t.Errorf("the component's PrometheusRule groups differ from deploy/prometheus/leader-elector-rules.yaml")
	}
}

func selects(selector map[string]string, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestRulesRunbooks: every alert has a for, a severity, a summary, a
// description and a runbook_url whose anchor is its own heading in
// docs/operations.md.
func TestRulesRunbooks(t *testing.T) {
	b, err := os.ReadFile(inRepo("deploy", "prometheus", "leader-elector-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct {
				Alert, For  string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(inRepo("docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	const base = "https://github.com/leader-elector/leader-elector/blob/main/docs/operations.md#"
	alerts := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts++
			if r.For == "" {
				t.Errorf("%s has no for", r.Alert)
			}
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s lacks a summary or a description", r.Alert)
			}
			if want := base + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !strings.Contains(string(ops), "\n#### "+r.Alert+"\n") {
				t.Errorf("docs/operations.md has no runbook heading `#### %s`", r.Alert)
			}
		}
	}
	if alerts < 6 {
		t.Errorf("%d alerts, want at least 6", alerts)
	}
}
