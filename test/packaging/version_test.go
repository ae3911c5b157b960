//go:build integration

package packaging

import (
	"context"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// Version is the project's version, from the VERSION file: the one source
// the binary's --version, the image's tag and labels and the chart's
// version and appVersion come from (`make release`).
func Version() (string, error) {
	b, err := os.ReadFile(inRepo("VERSION"))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// TestVersionsAgree: what ships in the repository carries the VERSION file's
// version, so that a chart installed from a checkout names the image a
// `make release` of that checkout pushes.
func TestVersionsAgree(t *testing.T) {
	version, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(inRepo("charts", "leader-elector", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion != version || chart.Version != strings.TrimPrefix(version, "v") {
		t.Errorf("Chart.yaml: version %q, appVersion %q; VERSION is %q", chart.Version, chart.AppVersion, version)
	}

	// manifests/example-supervisor sets the image again for the container
	// it adds (../example's images: does not reach it).
	for _, dir := range []string{"example", "example-supervisor"} {
		var kustomization struct {
			Images []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		b, err = os.ReadFile(inRepo("manifests", dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &kustomization); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, img := range kustomization.Images {
			if img.Name != "leader-elector" {
				continue
			}
			found = true
			if img.NewTag != version {
				t.Errorf("manifests/%s: the leader-elector image's tag is %q; VERSION is %q", dir, img.NewTag, version)
			}
			// No official image exists yet: the example must name one that
			// cannot resolve to somebody else's image.
			if host, _, _ := strings.Cut(img.NewName, "/"); !strings.HasSuffix(host, ".invalid") {
				t.Errorf("manifests/%s: the leader-elector image %q is not a placeholder under .invalid, and no official image is published", dir, img.NewName)
			}
		}
		if !found {
			t.Errorf("manifests/%s: no images entry for leader-elector", dir)
		}
	}
}

// TestChartRequiresImageRepository: without image.repository the chart
// fails with a message that says what to set, rather than naming an image
// that does not exist.
func TestChartRequiresImageRepository(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "demo.enabled=true"}} {
		_, err := HelmTemplate(context.Background(), ChartDir(), release, namespace, args...)
		if err == nil || !strings.Contains(err.Error(), "image.repository is required") {
			t.Errorf("helm template %v without image.repository: %v, want the image.repository is required message", args, err)
		}
	}
	_, d := demo(t)
	sc, _, err := Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	version, err := Version()
	if err != nil {
		t.Fatal(err)
	}
	want := TestImageRepository + ":" + version
	if sc.Image != want {
		t.Errorf("sidecar image %q, want %q (the repository given, the tag the chart's appVersion)", sc.Image, want)
	}
}
