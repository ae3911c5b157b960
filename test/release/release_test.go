//go:build integration

// Package release proves the release path against a real OCI registry: it
// starts the CNCF distribution registry on loopback (test/registry),
// runs `make release REGISTRY=127.0.0.1:<port>/test` as a maintainer would,
// and then checks what a user gets from that registry — the image index
// with amd64 and arm64, the version in the image's label and binary, the
// chart pulled with `helm pull oci://…` carrying appVersion = VERSION and
// rendering the pushed image — and the SBOM written next to the archive.
// `make release-test` runs it (part of `make test`).
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/packaging"
	"github.com/leader-elector/leader-elector/test/registry"
)

// What `make release-test` passes in: the build stage and base the release
// is built with here, as no image registry can be reached from CI
// (test/image/local-builder.sh and scratch, as for `make image-test`).
const (
	goImageEnv   = "LEADER_ELECTOR_RELEASE_GO_IMAGE"
	baseImageEnv = "LEADER_ELECTOR_RELEASE_BASE_IMAGE"
)

var (
	registryHost string // 127.0.0.1:<port>
	releaseDir   string // RELEASE_DIR of the make release run
	version      string // the VERSION file's
)

const repoPath = "test" // REGISTRY=<registryHost>/test

func TestMain(m *testing.M) {
	os.Exit(setUpAndRun(m))
}

func setUpAndRun(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "release test setup: "+format+"\n", args...)
		return 1
	}
	goImage, baseImage := os.Getenv(goImageEnv), os.Getenv(baseImageEnv)
	if goImage == "" || baseImage == "" {
		return fail("%s and %s must be set: run `make release-test`, which sets them", goImageEnv, baseImageEnv)
	}
	root, err := harness.RepoRoot()
	if err != nil {
		return fail("%v", err)
	}
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		return fail("%v", err)
	}
	version = strings.TrimSpace(string(b))
	work, err := os.MkdirTemp("", "leader-elector-release-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(work)

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	reg, err := registry.Start(ctx, filepath.Join(work, "registry"), os.Stderr)
	if err != nil {
		return fail("%v", err)
	}
	defer reg.Stop()
	registryHost = reg.Host
	fmt.Fprintf(os.Stderr, "registry serving on %s\n", registryHost)

	releaseDir = filepath.Join(work, "release")
	began := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "release",
		"REGISTRY="+registryHost+"/"+repoPath, "PLAIN_HTTP=1", "RELEASE_DIR="+releaseDir,
		"GO_IMAGE="+goImage, "BASE_IMAGE="+baseImage)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// make release's helm keeps its registry state out of the user's home.
	cmd.Env = append(os.Environ(), "HELM_REGISTRY_CONFIG="+filepath.Join(work, "helm-registry.json"))
	if err := cmd.Run(); err != nil {
		return fail("make release: %v", err)
	}
	fmt.Fprintf(os.Stderr, "MEASURED make release (multi-arch image, chart, SBOM) in %v\n", time.Since(began).Round(time.Second))
	return m.Run()
}

// OCI image-spec types, just the fields checked here.
type (
	descriptor struct {
		MediaType string `json:"mediaType"`
		Digest    string `json:"digest"`
		Platform  *struct {
			OS           string `json:"os"`
			Architecture string `json:"architecture"`
		} `json:"platform,omitempty"`
	}
	manifest struct {
		MediaType string       `json:"mediaType"`
		Manifests []descriptor `json:"manifests"` // an index
		Config    descriptor   `json:"config"`    // an image
		Layers    []descriptor `json:"layers"`
	}
	imageConfig struct {
		Architecture string `json:"architecture"`
		Config       struct {
			Labels map[string]string `json:"Labels"`
		} `json:"config"`
	}
)

const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
)

// get fetches /v2/<name>/<kind>/<ref> from the registry, as a client that
// accepts OCI indexes and manifests.
func get(t *testing.T, name, kind, ref string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v2/%s/%s/%s", registryHost, name, kind, ref), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", ociIndex+", "+ociManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", req.URL, resp.Status, b)
	}
	return b
}

func getJSON(t *testing.T, name, kind, ref string, v any) {
	t.Helper()
	if err := json.Unmarshal(get(t, name, kind, ref), v); err != nil {
		t.Fatalf("%s %s %s: %v", name, kind, ref, err)
	}
}

// TestReleasedImage: the registry holds an OCI index for amd64 and arm64 at
// leader-elector:<VERSION>; each image's version label is VERSION, and the
// binary for this machine's architecture prints VERSION with --version.
func TestReleasedImage(t *testing.T) {
	name := repoPath + "/leader-elector"
	var index manifest
	getJSON(t, name, "manifests", version, &index)
	if index.MediaType != ociIndex {
		t.Errorf("leader-elector:%s is a %q, want an OCI index", version, index.MediaType)
	}
	var platforms []string
	for _, d := range index.Manifests {
		if d.Platform == nil {
			continue
		}
		platform := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, platform)
		t.Run(platform, func(t *testing.T) {
			var m manifest
			getJSON(t, name, "manifests", d.Digest, &m)
			var config imageConfig
			getJSON(t, name, "blobs", m.Config.Digest, &config)
			if config.Architecture != d.Platform.Architecture {
				t.Errorf("config architecture %q, index says %q", config.Architecture, d.Platform.Architecture)
			}
			if got := config.Config.Labels["org.opencontainers.image.version"]; got != version {
				t.Errorf("label org.opencontainers.image.version %q, want %q (VERSION)", got, version)
			}
			if d.Platform.Architecture != runtime.GOARCH {
				return
			}
			bin := binaryFromLayers(t, name, m.Layers)
			out, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("leader-elector --version: %v: %s", err, out)
			}
			if !strings.Contains(string(out), version) {
				t.Errorf("leader-elector --version printed %q, want %q (VERSION)", out, version)
			}
			t.Logf("checked: the pulled %s binary's --version printed %q", platform, strings.TrimSpace(string(out)))
		})
	}
	for _, want := range []string{"linux/amd64", "linux/arm64"} {
		if !slices.Contains(platforms, want) {
			t.Errorf("the index has %v, want %s", platforms, want)
		}
	}
}

// binaryFromLayers pulls the image's layers and writes its /leader-elector
// to a file.
func binaryFromLayers(t *testing.T, name string, layers []descriptor) string {
	t.Helper()
	for _, l := range layers {
		gz, err := gzip.NewReader(bytes.NewReader(get(t, name, "blobs", l.Digest)))
		if err != nil {
			t.Fatalf("layer %s: %v", l.Digest, err)
		}
		tr := tar.NewReader(gz)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("layer %s: %v", l.Digest, err)
			}
			if strings.TrimPrefix(h.Name, "./") != "leader-elector" {
				continue
			}
			path := filepath.Join(t.TempDir(), "leader-elector")
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, b, 0o755); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}
	t.Fatalf("no /leader-elector in the image's layers")
	return ""
}

// TestReleasedChart: `helm pull oci://…/charts/leader-elector --version
// VERSION` gets the chart, its version and appVersion are VERSION, and it
// renders the pushed image without any --set image.…: the installed chart
// runs the image released with it.
func TestReleasedChart(t *testing.T) {
	ctx := context.Background()
	dest := t.TempDir()
	ref := "oci://" + registryHost + "/" + repoPath + "/charts/leader-elector"
	if _, err := packaging.Run(ctx, "helm", "pull", ref, "--version", version, "--plain-http", "--untar", "--destination", dest); err != nil {
		t.Fatal(err)
	}
	chartDir := filepath.Join(dest, "leader-elector")
	b, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != strings.TrimPrefix(version, "v") || chart.AppVersion != version {
		t.Errorf("pulled chart: version %q, appVersion %q; want %q (VERSION)", chart.Version, chart.AppVersion, version)
	}
	objs, err := packaging.HelmTemplate(ctx, chartDir, "demo", "ns", "--set", "demo.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	sc, _, err := packaging.Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if want := registryHost + "/" + repoPath + "/leader-elector:" + version; sc.Image != want {
		t.Errorf("the pulled chart renders the sidecar image %q, want the released %q", sc.Image, want)
	}
	t.Logf("checked: helm pull %s --version %s; the chart renders %s", ref, version, sc.Image)
}

// TestSBOM: make release wrote a CycloneDX SBOM of the binary next to the
// image archive, listing the modules it is built from.
func TestSBOM(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(releaseDir, "leader-elector-"+version+".sbom.cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(releaseDir, "leader-elector-"+version+".oci.tar")); err != nil {
		t.Errorf("the image archive: %v", err)
	}
	var bom struct {
		BOMFormat string `json:"bomFormat"`
		Metadata  struct {
			Component struct {
				Name string `json:"name"`
			} `json:"component"`
		} `json:"metadata"`
		Components []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &bom); err != nil {
		t.Fatal(err)
	}
	if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Name != "github.com/leader-elector/leader-elector" {
		t.Errorf("SBOM: format %q, component %q", bom.BOMFormat, bom.Metadata.Component.Name)
	}
	var names []string
	for _, c := range bom.Components {
		names = append(names, c.Name)
	}
	for _, want := range []string{"k8s.io/client-go", "k8s.io/klog/v2"} {
		if !slices.Contains(names, want) {
			t.Errorf("SBOM components %v lack %s", names, want)
		}
	}
}
