//go:build integration

package node_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/packaging"
	"github.com/leader-elector/leader-elector/test/registry"
)

// TestHelmInstallFromRegistry installs the way users do: `make release` to
// a registry (the CNCF distribution registry, started here, in the node's
// network namespace), then `helm install oci://…/charts/leader-elector
// --version <VERSION>` with no image values, and the node's containerd
// pulls the released image from that registry (nothing is imported under
// its name; a Pulled event names the image). One leader must be elected
// and settle.
func TestHelmInstallFromRegistry(t *testing.T) {
	goImage, err := env("LEADER_ELECTOR_NODE_GO_IMAGE")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(b))

	work := t.TempDir()
	reg, err := registry.Start(ctx, filepath.Join(work, "registry"), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Stop()
	// The node's containerd pulls from a loopback registry over plain HTTP
	// with no registry configuration (its resolver allows HTTP for
	// localhost and loopback addresses; checked: a hosts.toml made no
	// difference). A registry elsewhere without TLS needs a hosts.toml.

	began := time.Now()
	release := exec.CommandContext(ctx, "make", "--no-print-directory", "release",
		"REGISTRY="+reg.Host+"/node", "PLAIN_HTTP=1", "RELEASE_DIR="+filepath.Join(work, "release"),
		"GO_IMAGE="+goImage, "BASE_IMAGE=scratch")
	release.Dir = root
	// The node's network namespace reaches no module proxy: `go run
	// …@version` (the SBOM tool) resolves from the module cache, which
	// make e2e-cluster filled outside it, served as a file proxy (its
	// modules were checked against the checksum database when fetched).
	modCache, err := exec.CommandContext(ctx, "go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	release.Env = append(os.Environ(), "HELM_REGISTRY_CONFIG="+filepath.Join(work, "helm-registry.json"),
		"GOPROXY=file://"+filepath.Join(strings.TrimSpace(string(modCache)), "cache", "download"), "GOSUMDB=off")
	if out, err := release.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	t.Logf("MEASURED make release to %s in %v", reg.Host, time.Since(began).Round(time.Second))

	const namespace, name = "chart-registry", "demo"
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if _, err := theNode.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chart := "oci://" + reg.Host + "/node/charts/leader-elector"
	// The same chart, rendered, names the objects to watch.
	dest := t.TempDir()
	if _, err := packaging.Run(ctx, "helm", "pull", chart, "--version", version, "--plain-http", "--untar", "--destination", dest); err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.HelmTemplate(ctx, filepath.Join(dest, "leader-elector"), name, namespace, "--set", "demo.enabled=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	d := track(t, "helm install "+chart, objs)
	began = time.Now()
	if out, err := packaging.Run(ctx, "helm", "install", name, chart, "--version", version, "--plain-http",
		"--namespace", namespace, "--set", "demo.enabled=true", "--kubeconfig", theNode.ControlPlane().AdminKubeconfig()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	leader := d.waitSettled(t, 3*time.Minute)
	t.Logf("MEASURED helm install from the registry to a settled leader (%s) in %v", leader, time.Since(began).Round(time.Millisecond))

	// The sidecar runs the released image, pulled from the registry.
	want := reg.Host + "/node/leader-elector:" + version
	pods, err := d.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if c.Name == "leader-elector" && c.Image != want {
				t.Errorf("pod %s: sidecar image %q, want the released %q", p.Name, c.Image, want)
			}
		}
	}
	events, err := theNode.Client().CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=Pulled"})
	if err != nil {
		t.Fatal(err)
	}
	pulled := false
	for _, e := range events.Items {
		if strings.Contains(e.Message, "Successfully pulled image \""+want+"\"") {
			pulled = true
		}
	}
	if !pulled {
		t.Errorf("no Pulled event says the kubelet pulled %s from the registry", want)
	}
}
