//go:build integration

package packaging

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/leader-elector/leader-elector/test/harness"
)

// TestChartDocsCurrent: the chart's README is what `make chart-docs`
// (helm-docs, pinned in the Makefile) makes of README.md.gotmpl and
// values.yaml, so the values table cannot fall behind values.yaml.
func TestChartDocsCurrent(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	charts := filepath.Join(t.TempDir(), "charts")
	if err := os.CopyFS(filepath.Join(charts, "leader-elector"), os.DirFS(ChartDir())); err != nil {
		t.Fatal(err)
	}
	generated := filepath.Join(charts, "leader-elector", "README.md")
	if err := os.Remove(generated); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "-C", root, "--no-print-directory", "chart-docs", "CHART_DOCS_ROOT="+charts)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make chart-docs: %v\n%s", err, out)
	}
	want, err := os.ReadFile(generated)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(ChartDir(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		diff, _ := exec.Command("diff", "-u", filepath.Join(ChartDir(), "README.md"), generated).CombinedOutput()
		t.Errorf("charts/leader-elector/README.md is stale: run `make chart-docs` and commit the result\n%s", diff)
	}
	if !strings.Contains(string(got), "| imagePullSecrets | list | `[]` |") {
		t.Errorf("the values table lacks imagePullSecrets")
	}
}

// TestChartKubeVersion: `helm template` needs no --kube-version with a
// helm release build (the pinned helm is built as those are), and a helm
// that assumes an old Kubernetes (a plain `go install` assumes 1.20) gets a
// message that says what to pass, not helm's bare "incompatible with
// Kubernetes v1.20.0".
func TestChartKubeVersion(t *testing.T) {
	ctx := context.Background()
	out, err := Run(ctx, "helm", "template", "r", ChartDir(), "--set", "image.repository=registry.example.com/leader-elector", "--set", "demo.enabled=true")
	if err != nil {
		t.Fatalf("helm template without --kube-version: %v", err)
	}
	if objs, err := Decode(out); err != nil || len(objs.OfKind("Deployment")) != 1 {
		t.Fatalf("helm template without --kube-version rendered %v, %v", objs.Kinds(), err)
	}
	_, err = Run(ctx, "helm", "template", "r", ChartDir(), "--set", "image.repository=registry.example.com/leader-elector", "--kube-version", "1.20.0")
	if err == nil || !strings.Contains(err.Error(), "supports Kubernetes 1.30 or later (the oldest release its tests run), and helm renders for v1.20.0") || !strings.Contains(err.Error(), "pass --kube-version") {
		t.Errorf("helm template for Kubernetes 1.20: %v, want a message naming --kube-version", err)
	}
}

// TestChartPullSecretsAndAppEnv: imagePullSecrets reach the demo's pods and
// a user's pods through leader-elector.imagePullSecrets, and
// leader-elector.appEnv gives the app LEADER_ELECTOR_URL on the sidecar's port.
func TestChartPullSecretsAndAppEnv(t *testing.T) {
	check := func(t *testing.T, objs Objects, wantSecrets []string, wantURL string) {
		t.Helper()
		var d appsv1.Deployment
		if err := objs.OneInto("Deployment", &d); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range d.Spec.Template.Spec.ImagePullSecrets {
			got = append(got, s.Name)
		}
		if !slices.Equal(got, wantSecrets) {
			t.Errorf("imagePullSecrets %v, want %v", got, wantSecrets)
		}
		i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })
		if i < 0 {
			t.Fatal("no app container")
		}
		if !slices.ContainsFunc(d.Spec.Template.Spec.Containers[i].Env, func(e corev1.EnvVar) bool {
			return e.Name == "LEADER_ELECTOR_URL" && e.Value == wantURL
		}) {
			t.Errorf("app env %+v, want LEADER_ELECTOR_URL=%s", d.Spec.Template.Spec.Containers[i].Env, wantURL)
		}
	}
	repo := []string{"--set", "image.repository=registry.example.com/leader-elector"}
	t.Run("demo", func(t *testing.T) {
		check(t, helmTemplate(t, append(repo, "--set", "demo.enabled=true")...), nil, "http://127.0.0.1:4040")
		check(t, helmTemplate(t, append(repo, "--set", "demo.enabled=true", "--set", "imagePullSecrets[0].name=regcred", "--set", "imagePullSecrets[1].name=other", "--set", "sidecar.httpPort=5050")...),
			[]string{"regcred", "other"}, "http://127.0.0.1:5050")
	})
	t.Run("dependency", func(t *testing.T) {
		app := userChart(t)
		dep := []string{"--set", "leader-elector.image.repository=registry.example.com/leader-elector"}
		objs, err := HelmTemplate(context.Background(), app, "rel", "apps", dep...)
		if err != nil {
			t.Fatal(err)
		}
		check(t, objs, nil, "http://127.0.0.1:4040")
		objs, err = HelmTemplate(context.Background(), app, "rel", "apps", append(dep, "--set", "leader-elector.imagePullSecrets[0].name=regcred")...)
		if err != nil {
			t.Fatal(err)
		}
		check(t, objs, []string{"regcred"}, "http://127.0.0.1:4040")
	})
}
