// Package packaging renders what the project ships — the kustomize
// manifests under manifests/ and the Helm chart under charts/ — for tests,
// with helm and kustomize at pinned versions (tools.sh installs them on first
// use), and checks the pod templates in them against what the sidecar needs.
//
// It is test support: nothing that ships imports it.
package packaging

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/leader-elector/leader-elector/test/harness"
)

// inRepo is the path of elem below the repository's top directory. It
// panics if there is no repository around: every file this package reads
// is in it, and its callers are tests run from a checkout.
func inRepo(elem ...string) string {
	root, err := harness.RepoRoot()
	if err != nil {
		panic(err)
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// ChartDir is the shipped chart.
func ChartDir() string { return inRepo("charts", "leader-elector") }

// TestdataDir is a directory under test/packaging/testdata.
func TestdataDir(name string) string { return inRepo("test", "packaging", "testdata", name) }

// ManifestsDir is a directory under manifests/ (base, example, …).
func ManifestsDir(name string) string { return inRepo("manifests", name) }

// KubeVersionEnv names the release the e2e tests run against when it is not
// the pinned one: `make e2e-matrix` sets it with the tools directory, so that
// charts are rendered for the API server they are applied to, as `helm
// install` renders for its cluster.
const KubeVersionEnv = "LEADER_ELECTOR_KUBE_VERSION"

// KubeVersion is the version of the kube-apiserver the e2e tests run
// ($LEADER_ELECTOR_KUBE_VERSION, else the one pinned in
// test/tools/kube/go.mod); charts are rendered for it.
func KubeVersion() (string, error) {
	if v := os.Getenv(KubeVersionEnv); v != "" {
		return v, nil
	}
	path := inRepo("test", "tools", "kube", "go.mod")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 3 && fields[0] == "require" && fields[1] == "k8s.io/kubernetes" {
			return fields[2], nil
		}
	}
	return "", fmt.Errorf("%s: no `require k8s.io/kubernetes` line", path)
}

var (
	toolsOnce sync.Once
	toolsDir  string
	toolsErr  error
)

// Tools returns the directory holding helm and kustomize, installing them
// (test/packaging/tools.sh) the first time; progress goes to progress.
func Tools(ctx context.Context, progress io.Writer) (string, error) {
	toolsOnce.Do(func() {
		var stdout bytes.Buffer
		cmd := exec.CommandContext(ctx, "bash", inRepo("test", "packaging", "tools.sh"))
		cmd.Stdout = &stdout
		cmd.Stderr = progress
		if err := cmd.Run(); err != nil {
			toolsErr = fmt.Errorf("installing helm and kustomize (test/packaging/tools.sh): %w", err)
			return
		}
		lines := strings.Fields(stdout.String())
		if len(lines) == 0 {
			toolsErr = errors.New("test/packaging/tools.sh printed no directory")
			return
		}
		toolsDir = lines[len(lines)-1]
	})
	return toolsDir, toolsErr
}

// Run runs helm or kustomize with args and returns its standard output; an
// error carries its standard error.
func Run(ctx context.Context, tool string, args ...string) ([]byte, error) {
	dir, err := Tools(ctx, os.Stderr)
	if err != nil {
		return nil, err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(dir, tool), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// helm keeps its state out of the user's home.
	home := filepath.Join(dir, "helm-home")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// TestImageRepository is the repository the tests build the image under
// (`make image-test-archive`) and give the chart, which requires one.
const TestImageRepository = "localhost/leader-elector"

// WithImage returns helm arguments that give the chart TestImageRepository,
// followed by extra (which come later, and so win).
func WithImage(extra ...string) []string {
	return append([]string{"--set", "image.repository=" + TestImageRepository}, extra...)
}

// HelmTemplate renders chartDir as release in namespace for KubeVersion,
// with extra helm arguments (--set …, -f …).
func HelmTemplate(ctx context.Context, chartDir, release, namespace string, extra ...string) (Objects, error) {
	kv, err := KubeVersion()
	if err != nil {
		return nil, err
	}
	args := append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kv}, extra...)
	out, err := Run(ctx, "helm", args...)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}

// KustomizeExampleWithImage renders manifests/<name> (example or one of its
// variants) with the sidecar's image set the way the examples tell users
// to: `kustomize edit set image leader-elector=<image>` in each
// kustomization that sets it (manifests/example, and
// manifests/example-supervisor for its copy container), here in a copy of
// manifests/ so that the checkout stays as it is.
func KustomizeExampleWithImage(ctx context.Context, name, image string) (Objects, error) {
	dir, err := os.MkdirTemp("", "leader-elector-manifests-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, os.DirFS(inRepo("manifests"))); err != nil {
		return nil, err
	}
	tools, err := Tools(ctx, os.Stderr)
	if err != nil {
		return nil, err
	}
	kustomizations, err := filepath.Glob(filepath.Join(dir, "*", "kustomization.yaml"))
	if err != nil {
		return nil, err
	}
	for _, k := range kustomizations {
		b, err := os.ReadFile(k)
		if err != nil {
			return nil, err
		}
		if !imageSet.Match(b) {
			continue
		}
		edit := exec.CommandContext(ctx, filepath.Join(tools, "kustomize"), "edit", "set", "image", "leader-elector="+image)
		edit.Dir = filepath.Dir(k)
		if out, err := edit.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("kustomize edit set image leader-elector=%s in %s: %w: %s", image, filepath.Base(edit.Dir), err, out)
		}
	}
	return KustomizeBuild(ctx, filepath.Join(dir, name))
}

// imageSet matches a kustomization's images: entry for the leader-elector
// image.
var imageSet = regexp.MustCompile(`(?m)^images:\n(?:[ #].*\n)*\s+- name: leader-elector\n`)

// KustomizeBuild renders a kustomization directory.
func KustomizeBuild(ctx context.Context, dir string) (Objects, error) {
	out, err := Run(ctx, "kustomize", "build", dir)
	if err != nil {
		return nil, err
	}
	return Decode(out)
}

// Decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func Decode(data []byte) (Objects, error) {
	var objs Objects
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding rendered YAML: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// Objects is a rendered set of objects.
type Objects []*unstructured.Unstructured

// OfKind returns the objects of one kind.
func (o Objects) OfKind(kind string) Objects {
	var out Objects
	for _, u := range o {
		if u.GetKind() == kind {
			out = append(out, u)
		}
	}
	return out
}

// One returns the only object of kind, or an error if there is not exactly one.
func (o Objects) One(kind string) (*unstructured.Unstructured, error) {
	of := o.OfKind(kind)
	if len(of) != 1 {
		return nil, fmt.Errorf("want exactly one %s, got %d", kind, len(of))
	}
	return of[0], nil
}

// Kinds lists every object as Kind/name, in order.
func (o Objects) Kinds() []string {
	var out []string
	for _, u := range o {
		out = append(out, u.GetKind()+"/"+u.GetName())
	}
	return out
}

// Into converts an object into a typed API struct.
func Into(u *unstructured.Unstructured, typed any) error {
	if err := k8sruntime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, typed, true); err != nil {
		return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

// OneInto is One followed by Into.
func (o Objects) OneInto(kind string, typed any) error {
	u, err := o.One(kind)
	if err != nil {
		return err
	}
	return Into(u, typed)
}
