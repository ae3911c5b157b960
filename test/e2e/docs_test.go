//go:build integration

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
	"sigs.k8s.io/yaml"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
	"github.com/leader-elector/leader-elector/test/packaging"
	"github.com/leader-elector/leader-elector/test/registry"
	"github.com/leader-elector/leader-elector/test/snippets"
)

// TestDocSnippets runs every code block of the user docs marked
// `<!-- test: NAME -->` (see package snippets) with the handler NAME below:
// YAML is applied to the real API server, shell commands are run as
// written where they can run here (kustomize, helm install, kubectl — the
// real ones) and replaced by the equivalent API read where they need what
// this suite has not (a kubelet for `kubectl logs` and `exec`). Applied workloads get real leader-elector
// processes started from their pod templates with their ServiceAccount's
// token, so a snippet whose RBAC does not fit its sidecar fails here.
// A handler without a block, or a marked block without a handler, fails.
func TestDocSnippets(t *testing.T) {
	files, err := snippets.DocFiles(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := snippets.Extract(repoRoot, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range snippets.Check(blocks) {
		t.Error(p)
	}
	handlers := map[string]func(t *testing.T, b snippets.Block){
		"make-targets":              runShellSnippet,
		"image-build":               runShellSnippet,
		"kubectl-example":           runShellSnippet,
		"helm-install":              runShellSnippet,
		"helm-install-checkout":     runShellSnippet,
		"partitions-flags":          testPartitionsFlags,
		"pod-spec":                  testPodSpecSnippet,
		"worker-example":            testWorkerExample,
		"chart-dependency-template": testChartDependencyTemplate,
		"leader-answer-sample":      testLeaderAnswerSample,
		"networkpolicy-values":      testNetworkPolicyValues,
		"networkpolicy-component":   testNetworkPolicyComponent,
		"migration-rbac":            testMigrationRBAC,
		"go-client-example":         testGoClientExample,
		"go-forward-example":        testGoForwardExample,
		"go-steer-example":          testGoSteerExample,
		"go-apitest-example":        testGoApitestExample,
		"python-steer-example":      testPythonSteerExample,
		"kustomize-advertise-patch": testKustomizeAdvertisePatch,
		"notify-receiver-example":   testNotifyReceiverExample,
	}
	used := map[string]bool{}
	for _, b := range snippets.Tested(blocks) {
		used[b.Test] = true
		h, ok := handlers[b.Test]
		if !ok {
			t.Errorf("%s is marked test: %s, which no handler in TestDocSnippets runs", b, b.Test)
			continue
		}
		t.Run(b.Test, func(t *testing.T) {
			t.Logf("%s", b)
			h(t, b)
		})
	}
	for name := range handlers {
		if !used[name] {
			t.Errorf("handler %s has no block marked test: %s in %v", name, name, files)
		}
	}
}

// shell runs the commands of a shell snippet one by one in a copy of the
// repository's manifests and chart, as a user in a checkout would.
type shell struct {
	t        *testing.T
	root     string // the copy
	cwd, old string
	// leaders: the leading candidate's name for each namespace/Lease.
	leaders map[string]string
}

// runShellSnippet parses the block with a real shell parser (mvdan.cc/sh)
// and runs each simple command, also those joined by &&.
func runShellSnippet(t *testing.T, b snippets.Block) {
	f, err := syntax.NewParser().Parse(strings.NewReader(b.Text), b.File)
	if err != nil {
		t.Fatalf("%s: not a valid shell snippet: %v", b, err)
	}
	root := t.TempDir()
	for _, dir := range []string{"manifests", "charts"} {
		if out, err := exec.Command("cp", "-a", filepath.Join(repoRoot, dir), root).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", dir, err, out)
		}
	}
	sh := &shell{t: t, root: root, cwd: root, old: root, leaders: map[string]string{}}
	env := expand.ListEnviron(os.Environ()...)
	var run func(stmt *syntax.Stmt)
	run = func(stmt *syntax.Stmt) {
		switch c := stmt.Cmd.(type) {
		case *syntax.BinaryCmd:
			if c.Op != syntax.AndStmt {
				t.Fatalf("%s: only && joins commands here, not %s", b, c.Op)
			}
			run(c.X)
			run(c.Y)
		case *syntax.CallExpr:
			args, err := expand.Fields(&expand.Config{Env: env}, c.Args...)
			if err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if len(stmt.Redirs) > 0 {
				sh.writeHeredoc(b, args, stmt.Redirs, env)
				return
			}
			sh.command(args)
		default:
			t.Fatalf("%s: a %T, which this test cannot run: keep snippets to simple commands", b, stmt.Cmd)
		}
	}
	for _, stmt := range f.Stmts {
		run(stmt)
	}
}

// writeHeredoc runs `cat > FILE <<'EOF'`, the one redirection snippets
// use: a file of the user's own. Like mkdir, it must write only where git
// ignores (a newcomer's checkout stays clean).
func (sh *shell) writeHeredoc(b snippets.Block, args []string, redirs []*syntax.Redirect, env expand.Environ) {
	t := sh.t
	var file, text string
	for _, r := range redirs {
		var err error
		switch r.Op {
		case syntax.RdrOut:
			file, err = expand.Literal(&expand.Config{Env: env}, r.Word)
		case syntax.Hdoc:
			text, err = expand.Document(&expand.Config{Env: env}, r.Hdoc)
		default:
			t.Fatalf("%s: only `cat > FILE <<'EOF'` is run here, not %s", b, r.Op)
		}
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	if len(args) != 1 || args[0] != "cat" || file == "" {
		t.Fatalf("%s: only `cat > FILE <<'EOF'` is run here", b)
	}
	t.Logf("$ cat > %s\n%s", file, text)
	if err := os.WriteFile(sh.ignoredPath(file), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// ignoredPath is name under the current directory, which must be a path
// the repository's .gitignore covers: what a snippet writes must not show
// in the user's `git status`.
func (sh *shell) ignoredPath(name string) string {
	t := sh.t
	path := filepath.Join(sh.cwd, name)
	rel, err := filepath.Rel(sh.root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		t.Fatalf("%s is outside the checkout", name)
	}
	if out, err := exec.Command("git", "-C", repoRoot, "check-ignore", "--no-index", rel).CombinedOutput(); err != nil {
		t.Errorf("the snippet writes %s, which git does not ignore (the user's checkout would not stay clean): %v %s", rel, err, out)
	}
	return path
}

func (sh *shell) command(args []string) {
	t := sh.t
	t.Helper()
	t.Logf("$ %s", strings.Join(args, " "))
	switch args[0] {
	case "make":
		sh.make(args[1:])
	case "buildah":
		sh.buildah(args[1:])
	case "cd":
		next := sh.old
		if args[1] != "-" {
			next = filepath.Join(sh.cwd, args[1])
		}
		sh.old, sh.cwd = sh.cwd, next
	case "mkdir":
		if len(args) != 3 || args[1] != "-p" {
			t.Fatalf("%q: only mkdir -p DIR is run here", strings.Join(args, " "))
		}
		if err := os.MkdirAll(sh.ignoredPath(args[2]), 0o755); err != nil {
			t.Fatal(err)
		}
	case "kustomize":
		sh.tool("kustomize", args[1:]...)
	case "helm":
		if args[1] != "install" {
			t.Fatalf("helm %s: only helm install is run here", args[1])
		}
		sh.tool("helm", append(sh.fromLocalRegistry(args[1:]), "--kubeconfig", controlPlane.AdminKubeconfig())...)
		sh.elect(flagValue(t, args, "--namespace", "-n"))
	case "kubectl":
		sh.kubectl(args[1:])
	default:
		t.Fatalf("%q: no rule for this command in TestDocSnippets", strings.Join(args, " "))
	}
}

// docsRegistry is the example registry the docs push to and install from.
const docsRegistry = "registry.example.com/team"

// fromLocalRegistry points a chart reference in the docs' example registry
// (oci://registry.example.com/team/…) at a real registry on loopback, to
// which the chart is pushed first as `make release` pushes it (make
// release-chart): the install then pulls it as a user's does. Traffic never
// leaves the machine.
func (sh *shell) fromLocalRegistry(args []string) []string {
	t := sh.t
	const prefix = "oci://" + docsRegistry + "/"
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, prefix) })
	if i < 0 {
		return args
	}
	reg, err := registry.Start(context.Background(), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Stop)
	local := reg.Host + "/team"
	push := exec.Command("make", "-C", repoRoot, "--no-print-directory", "release-chart",
		"REGISTRY="+local, "PLAIN_HTTP=1", "RELEASE_DIR="+t.TempDir())
	if out, err := push.CombinedOutput(); err != nil {
		t.Fatalf("make release-chart: %v\n%s\n%s", err, out, reg.LogTail(20))
	}
	out := slices.Clone(args)
	out[i] = "oci://" + local + "/" + strings.TrimPrefix(args[i], prefix)
	return append(out, "--plain-http")
}

// make: the target exists (make help lists it) and every variable set on
// the command line is one the Makefile uses. Running them is CI's job
// (.ci/run runs make test and make demo).
func (sh *shell) make(args []string) {
	t := sh.t
	help, err := exec.Command("make", "-C", repoRoot, "--no-print-directory", "help").Output()
	if err != nil {
		t.Fatalf("make help: %v", err)
	}
	makefile, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range args {
		if name, _, ok := strings.Cut(a, "="); ok {
			if !bytes.Contains(makefile, []byte("$("+name+")")) && !bytes.Contains(makefile, []byte("$(if $("+name+")")) {
				t.Errorf("make %s: the Makefile does not use %s", strings.Join(args, " "), name)
			}
			continue
		}
		if !slices.ContainsFunc(strings.Split(string(help), "\n"), func(l string) bool { return strings.HasPrefix(l, a+"\t") }) {
			t.Errorf("make %s: `make help` lists no target %s:\n%s", strings.Join(args, " "), a, help)
		}
	}
}

// buildah (the push after make image): its storage options are those make
// image builds into, so the push finds the image.
func (sh *shell) buildah(args []string) {
	t := sh.t
	out, err := exec.Command("make", "-C", repoRoot, "--no-print-directory", "-n", "image", "IMAGE=x").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n image: %v: %s", err, out)
	}
	for i := 0; i+1 < len(args) && strings.HasPrefix(args[i], "--"); i += 2 {
		if opt := args[i] + " " + args[i+1]; !strings.Contains(string(out), opt) {
			t.Errorf("buildah %s: make image does not use %q:\n%s", strings.Join(args, " "), opt, out)
		}
	}
}

// tool runs helm or kustomize, as installed for the packaging tests, in the
// current directory.
func (sh *shell) tool(name string, args ...string) {
	t := sh.t
	dir, err := packaging.Tools(context.Background(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Dir = sh.cwd
	home := filepath.Join(dir, "helm-home")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// kubectl runs the real kubectl (built at the cluster's version, see
// kubeTool) with the admin kubeconfig, as
// the user runs it, and checks what the command must show: after
// `apply -k`, candidates run for the applied Deployments; `get lease`
// prints the leading candidate. `logs` and `exec` need a kubelet, which this
// API-server-only suite has not: what they name is checked instead (the
// node suite runs pods).
func (sh *shell) kubectl(args []string) {
	t := sh.t
	ctx := context.Background()
	cs := controlPlane.AdminClient()
	namespace := "default"
	var rest []string
	for i := 0; i < len(args); i++ {
		if args[i] == "-n" || args[i] == "--namespace" {
			namespace = args[i+1]
			i++
			continue
		}
		rest = append(rest, args[i])
	}
	verb := strings.Join(rest[:min(2, len(rest))], " ")
	switch {
	case verb == "apply -k":
		sh.runKubectl(args)
		// Which namespaces to elect in: those the kustomization creates.
		objs, err := packaging.KustomizeBuild(ctx, filepath.Join(sh.cwd, rest[2]))
		if err != nil {
			t.Fatal(err)
		}
		for _, ns := range objs.OfKind("Namespace") {
			sh.elect(ns.GetName())
		}
		// The user's overlay must replace the example's placeholder image
		// (under the reserved .invalid domain, which cannot be pulled): an
		// overlay whose images entry names the wrong image changes
		// nothing, which only a kubelet would show.
		for _, d := range objs.OfKind("Deployment") {
			containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "initContainers")
			more, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
			for _, c := range append(containers, more...) {
				if image, _ := c.(map[string]any)["image"].(string); strings.Contains(image, ".invalid/") {
					t.Errorf("kubectl %s: Deployment %s still runs the placeholder image %s", strings.Join(args, " "), d.GetName(), image)
				}
			}
		}
	case verb == "get lease":
		name := rest[2]
		want, ok := sh.leaders[namespace+"/"+name]
		if !ok {
			t.Fatalf("kubectl get lease %s in %s: no candidates run for this Lease (leaders: %v)", name, namespace, sh.leaders)
		}
		if got := strings.TrimSpace(sh.runKubectl(args)); got != want {
			t.Errorf("kubectl %s printed %q, want the leading candidate %q", strings.Join(args, " "), got, want)
		}
	case rest[0] == "logs" || rest[0] == "exec":
		// They need a kubelet: check that what they name exists.
		deploy, ok := strings.CutPrefix(rest[1], "deploy/")
		if !ok {
			t.Fatalf("kubectl %s: want deploy/NAME", strings.Join(rest, " "))
		}
		d, err := cs.AppsV1().Deployments(namespace).Get(ctx, deploy, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(rest, " "), err)
		}
		c := flagValue(t, rest, "-c", "--container")
		if !slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(x corev1.Container) bool { return x.Name == c }) {
			t.Errorf("kubectl %s: Deployment %s has no container %s", strings.Join(rest, " "), deploy, c)
		}
	case verb == "get endpointslices":
		// No pod runs here, so no endpoint is listed: the command must run
		// and the Service it names exist.
		sh.runKubectl(args)
		selector := flagValue(t, rest, "-l", "--selector")
		service, ok := strings.CutPrefix(selector, "kubernetes.io/service-name=")
		if !ok {
			t.Fatalf("kubectl get endpointslices -l %s: want the kubernetes.io/service-name label", selector)
		}
		if _, err := cs.CoreV1().Services(namespace).Get(ctx, service, metav1.GetOptions{}); err != nil {
			t.Errorf("kubectl get endpointslices -l %s: the Service: %v", selector, err)
		}
	default:
		t.Fatalf("kubectl %s: no rule for this in TestDocSnippets", strings.Join(rest, " "))
	}
}

// runKubectl runs kubectl with args in the current directory against the
// control plane (KUBECONFIG, as a user sets it; a private cache directory)
// and returns its standard output; a failure fails the test.
func (sh *shell) runKubectl(args []string) string {
	t := sh.t
	t.Helper()
	cmd := exec.Command(kubeTool(t, cluster.Kubectl), args...)
	cmd.Dir = sh.cwd
	cmd.Env = append(os.Environ(), "KUBECONFIG="+controlPlane.AdminKubeconfig(), "KUBECACHEDIR="+filepath.Join(sh.root, ".kube-cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	t.Logf("%s%s", stdout.String(), stderr.String())
	return stdout.String()
}

// elect starts two candidates from the pod template of every Deployment in
// namespace, with its ServiceAccount's token, and waits for a leader.
func (sh *shell) elect(namespace string) {
	t := sh.t
	ctx := context.Background()
	list, err := controlPlane.AdminClient().AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) == 0 {
		t.Fatalf("namespace %s: no Deployment to run", namespace)
	}
	for i := range list.Items {
		d := &list.Items[i]
		lease := electFromSpec(t, &d.Spec.Template.Spec, namespace, d.Name)
		sh.leaders[namespace+"/"+lease.lease] = lease.leader
	}
}

type elected struct{ lease, leader string }

// electFromSpec runs two candidates as the sidecar in spec with the token of
// spec's ServiceAccount and returns the Lease and its leader.
func electFromSpec(t *testing.T, spec *corev1.PodSpec, namespace, prefix string) elected {
	t.Helper()
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(context.Background(), namespace, spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	args, env := podTemplateCommand(t, spec, "x", namespace, kubeconfig, []int{0, 0})
	lease := ""
	for _, a := range args {
		for _, flag := range []string{"--lease-name=", "--election="} {
			if v, ok := strings.CutPrefix(a, flag); ok {
				lease = v
			}
		}
	}
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LEADER_ELECTOR_LEASE_NAME="); ok && lease == "" {
			lease = v
		}
	}
	if lease == "" {
		t.Fatalf("the sidecar of %s names no Lease", prefix)
	}
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for _, pod := range []string{prefix + "-a", prefix + "-b"} {
		g.Add(fromPodTemplate(t, spec, pod, namespace, kubeconfig))
	}
	// A new Lease is taken one lease duration (15 s by default) after the
	// candidates first see it.
	leader := g.WaitLeader(45 * time.Second)
	for _, c := range g.Members() {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something:\n%s", c.name, c.log())
		}
	}
	return elected{lease: lease, leader: leader.name}
}

func flagValue(t *testing.T, args []string, names ...string) string {
	t.Helper()
	for i, a := range args {
		for _, n := range names {
			if a == n && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, n+"="); ok {
				return v
			}
		}
	}
	t.Fatalf("%v: no %v", args, names)
	return ""
}

// testPodSpecSnippet: the README's pod spec, with the RBAC the README tells
// the user to apply (manifests/base), is admitted by the API server and its
// sidecar, run with that ServiceAccount's token, elects a leader.
func testPodSpecSnippet(t *testing.T, b snippets.Block) {
	ctx := context.Background()
	const namespace = "docs-pod-spec"
	var pod struct {
		Spec corev1.PodSpec `json:"spec"`
	}
	if err := yaml.UnmarshalStrict([]byte(b.Text), &pod); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	checkRecommendedShape(t, &pod.Spec)
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	objs, err := packaging.KustomizeBuild(ctx, packaging.ManifestsDir("base"))
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "docs-"}, Spec: pod.Spec}
	if _, err := controlPlane.AdminClient().CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
		t.Fatalf("the API server refuses the README's pod: %v", err)
	}
	e := electFromSpec(t, &pod.Spec, namespace, "docs")
	if holder := harnesstest.LeaseHolder(t, controlPlane, namespace, e.lease); holder != e.leader {
		t.Errorf("Lease %s names %q, %s leads", e.lease, holder, e.leader)
	}
}

// checkRecommendedShape: the pod spec newcomers copy is the shape the
// example ships: the sidecar a native sidecar (an init container that
// restarts always: up before the app, down after it) with resources, and
// the ServiceAccount's token mounted into the sidecar alone.
func checkRecommendedShape(t *testing.T, spec *corev1.PodSpec) {
	t.Helper()
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Error("the pod automounts the ServiceAccount token into every container, the app's too")
	}
	tokenVolumes := map[string]bool{}
	for _, v := range spec.Volumes {
		if v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool { return p.ServiceAccountToken != nil }) {
			tokenVolumes[v.Name] = true
		}
	}
	var sidecar *corev1.Container
	for i, c := range spec.InitContainers {
		if c.Name == "leader-elector" {
			sidecar = &spec.InitContainers[i]
		}
	}
	switch {
	case sidecar == nil:
		t.Fatal("no leader-elector init container: the sidecar is not a native sidecar")
	case sidecar.RestartPolicy == nil || *sidecar.RestartPolicy != corev1.ContainerRestartPolicyAlways:
		t.Error("the leader-elector init container has no restartPolicy: Always (it would run to completion before the app)")
	case sidecar.Resources.Requests.Memory().IsZero() || sidecar.Resources.Limits.Memory().IsZero():
		t.Error("the sidecar has no memory request and limit")
	case !slices.ContainsFunc(sidecar.VolumeMounts, func(m corev1.VolumeMount) bool { return tokenVolumes[m.Name] }):
		t.Error("the sidecar does not mount the ServiceAccount token")
	}
	for _, c := range spec.Containers {
		if slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return tokenVolumes[m.Name] }) {
			t.Errorf("container %s mounts the ServiceAccount token: only the sidecar needs it", c.Name)
		}
	}
}

// testPartitionsFlags: the command line, with the admin's credentials (the
// partition RBAC is docs/partitions.md's own subject), gives one pod every
// partition.
func testPartitionsFlags(t *testing.T, b snippets.Block) {
	f, err := syntax.NewParser().Parse(strings.NewReader(b.Text), b.File)
	if err != nil || len(f.Stmts) != 1 {
		t.Fatalf("%s: want one command: %v", b, err)
	}
	call, ok := f.Stmts[0].Cmd.(*syntax.CallExpr)
	if !ok {
		t.Fatalf("%s: want a simple command", b)
	}
	args, err := expand.Fields(nil, call.Args...)
	if err != nil || args[0] != "leader-elector" {
		t.Fatalf("%s: want leader-elector FLAGS: %v", b, err)
	}
	const namespace = "docs-partitions"
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The harness passes the Lease's name itself.
	lease := flagValue(t, args, "--lease-name")
	flags := slices.DeleteFunc(slices.Clone(args[1:]), func(a string) bool { return strings.HasPrefix(a, "--lease-name") })
	c := startCandidate(t, "docs-partitions", candidateOptions{lease: lease, namespace: namespace, extraArgs: flags, startedPath: "/partitions"})
	partitions := flagValue(t, args, "--partitions")
	n, err := strconv.Atoi(partitions)
	if err != nil {
		t.Fatalf("%s: --partitions=%s: %v", b, partitions, err)
	}
	var last string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		code, _, body, err := c.do("GET", "/partitions", nil)
		last = fmt.Sprintf("%d %s %v", code, body, err)
		return code == 200 && strings.Contains(string(body), `"partitions":`+partitions+`,`) && strings.Count(string(body), `"fencingToken"`) == n, nil
	}); err != nil {
		t.Fatalf("one pod of --partitions=%s never owned them all: %s\n%s", partitions, last, c.log())
	}
}

// testWorkerExample: the Go code shown is examples/worker's, verbatim.
func testWorkerExample(t *testing.T, b snippets.Block) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "worker", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(src, []byte(b.Text)) {
			return
		}
	}
	t.Errorf("%s is not part of examples/worker (which the e2e suite runs): copy it from there again", b)
}

// testGoClientExample: every line of the Go snippet (comments and spacing
// aside) is a line of package api's Example_fromGo, which the unit tests
// run against a fake sidecar and check the output of.
func testGoClientExample(t *testing.T, b snippets.Block) {
	checkGoSnippet(t, b, "example_test.go", "api.Example_fromGo")
}

// testGoSteerExample: the acquire/checkAlive/release snippet is the code of
// api.Example_steer, which make unit runs (TestAcquireClient runs the same
// calls against a real sidecar).
func testGoSteerExample(t *testing.T, b snippets.Block) {
	checkGoSnippet(t, b, "example_test.go", "api.Example_steer")
}

// testGoApitestExample: the fake-sidecar snippet is code of apitest.Example
// and Example_partitions, which make unit runs.
func testGoApitestExample(t *testing.T, b snippets.Block) {
	checkGoSnippet(t, b, filepath.Join("apitest", "example_test.go"), "api/apitest's examples")
}

// testPythonSteerExample runs the Python snippet as an app would, next to a
// sidecar with --campaign=manual: it acquires (nobody else would), says it
// leads, and, when the sidecar's term ends (here by POST /release from
// outside, as a rollout would), prints the reason and exits 0. It needs
// python3 (Debian's), and fails, not skips, without it.
func testPythonSteerExample(t *testing.T, b snippets.Block) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to run the Python snippet: %v", err)
	}
	g := newGroup(t, 1, candidateOptions{extraArgs: []string{"--campaign=manual"}})
	sidecar := g.Members()[0]
	script := filepath.Join(t.TempDir(), "app.py")
	if err := os.WriteFile(script, []byte(b.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, script)
	cmd.Env = append(os.Environ(), "LEADER_ELECTOR_URL="+sidecar.apiURL)
	out := &harness.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	leader := g.WaitLeader(45 * time.Second)
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "leading with fencing token"), nil
	}); err != nil {
		t.Fatalf("the app did not say it leads: %q", out.String())
	}
	leader.release(t)
	if err := <-done; err != nil {
		t.Fatalf("the app: %v\n%s\nthe sidecar's events after the release: %s", err, out.String(), leader.log())
	}
	if got := out.String(); !strings.Contains(got, "lost leadership: released") {
		t.Errorf("the app printed %q, want the reason its term ended", got)
	}
}

// testGoForwardExample: the follower-forwarding snippet is the code of
// api.Example_forwardToLeader, which make unit runs.
func testGoForwardExample(t *testing.T, b snippets.Block) {
	checkGoSnippet(t, b, "forward_example_test.go", "api.Example_forwardToLeader")
}

// checkGoSnippet fails unless every line of b is a line of the example in
// api/file (comments and spacing aside).
func checkGoSnippet(t *testing.T, b snippets.Block, file, example string) {
	checkSnippetIn(t, b, filepath.Join("api", file), example)
}

// testNotifyReceiverExample: every line of the receiving app (comments and
// spacing aside) is a line of the receiver TestChangeNotificationsInOrder
// runs against real sidecars.
func testNotifyReceiverExample(t *testing.T, b snippets.Block) {
	checkSnippetIn(t, b, filepath.Join("test", "e2e", "notify_test.go"), "the receiver of test/e2e/notify_test.go")
}

// checkSnippetIn fails unless every line of b is a line of the repository's
// file path (comments and spacing aside), the code that runs: what names
// it in the error.
func checkSnippetIn(t *testing.T, b snippets.Block, path, what string) {
	src, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	normalize := func(line string) string {
		line, _, _ = strings.Cut(line, "//")
		return strings.Join(strings.Fields(line), " ")
	}
	code := map[string]bool{}
	for _, line := range strings.Split(string(src), "\n") {
		code[normalize(line)] = true
	}
	for _, line := range strings.Split(strings.TrimSpace(b.Text), "\n") {
		if !code[normalize(line)] {
			t.Errorf("%s: line %q is not in %s", b, line, what)
		}
	}
}

// testMigrationRBAC: the Lease and the Role the migration guide gives,
// bound to a ServiceAccount, are enough for sidecars started with the
// retired image's command line (--election, --election-namespace, --ttl,
// --use-cluster-credentials) to elect a leader.
func testMigrationRBAC(t *testing.T, b snippets.Block) {
	ctx := context.Background()
	const namespace = "docs-migration"
	objs, err := packaging.Decode([]byte(b.Text))
	if err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding, err := packaging.Decode([]byte(`apiVersion: v1
kind: ServiceAccount
metadata:
  name: my-app
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: leader-elector
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: leader-elector}
subjects: [{kind: ServiceAccount, name: my-app, namespace: ` + namespace + `}]
`))
	if err != nil {
		t.Fatal(err)
	}
	objs = append(objs, binding...)
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	lease := ""
	for _, u := range objs {
		if u.GetKind() == "Lease" {
			lease = u.GetName()
		}
	}
	// --id=$(POD_NAME) and --http are left out: the kubelet expands the
	// first, and the test gives every candidate its own address.
	spec := &corev1.PodSpec{
		ServiceAccountName: "my-app",
		Containers: []corev1.Container{{
			Name: "leader-elector",
			Args: []string{"--election=" + lease, "--election-namespace=" + namespace, "--ttl=4s", "--use-cluster-credentials"},
			Env:  []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
		}},
	}
	e := electFromSpec(t, spec, namespace, "migration")
	if holder := harnesstest.LeaseHolder(t, controlPlane, namespace, e.lease); holder != e.leader {
		t.Errorf("Lease %s names %q, %s leads", e.lease, holder, e.leader)
	}
}

// testNetworkPolicyValues: the values, with the chart, render objects the
// API server accepts (server-side dry run).
func testNetworkPolicyValues(t *testing.T, b snippets.Block) {
	ctx := context.Background()
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(b.Text), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), "docs", "default", "-f", values, "--set", "image.repository=registry.example.com/leader-elector")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.OfKind("NetworkPolicy")) != 1 {
		t.Fatalf("the values render %v, want one NetworkPolicy", objs.Kinds())
	}
	dryRunApply(t, objs)
}

// testNetworkPolicyComponent: the overlay, with manifests/example as the
// workload, builds, and the API server accepts what it builds.
func testNetworkPolicyComponent(t *testing.T, b snippets.Block) {
	// "Your overlay": the example as the workload, in its namespace.
	objs := buildExampleOverlay(t, "namespace: leader-elector-example\n", strings.ReplaceAll(b.Text, "<path to>", ".."))
	var np networkingv1.NetworkPolicy
	if err := objs.OneInto("NetworkPolicy", &np); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
		return len(r.Ports) == 1 && r.Ports[0].Port != nil && r.Ports[0].Port.IntValue() == 8081
	}) {
		t.Errorf("the patch did not add the app's port: %+v", np.Spec.Ingress)
	}
	dryRunApply(t, objs)
}

// buildExampleOverlay builds "your overlay" over manifests/example:
// header (kustomization fields such as a namespace) and body (the doc's
// snippet). kustomize takes only relative paths, so the overlay sits next
// to a copy of manifests/, which "<path to>" names in the docs.
func buildExampleOverlay(t *testing.T, header, body string) packaging.Objects {
	t.Helper()
	root := t.TempDir()
	if out, err := exec.Command("cp", "-a", filepath.Join(repoRoot, "manifests"), root).CombinedOutput(); err != nil {
		t.Fatalf("copying manifests: %v: %s", err, out)
	}
	dir := filepath.Join(root, "overlay")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	text := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + header + "resources: [../manifests/example]\n" + body
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.KustomizeBuild(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// testKustomizeAdvertisePatch: the patch, in an overlay over the example,
// gives the sidecar the advertised port and $POD_IP, leader-elector accepts
// that configuration, and the API server takes the objects.
func testKustomizeAdvertisePatch(t *testing.T, b snippets.Block) {
	objs := buildExampleOverlay(t, "", b.Text)
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	sc, _, err := packaging.Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	port, ok := packaging.EnvValue(sc, "LEADER_ELECTOR_ADVERTISE_PORT")
	podIP := slices.ContainsFunc(sc.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
	})
	if !ok || port != "8081" || !podIP {
		t.Errorf("the sidecar's environment after the patch: %+v", sc.Env)
	}
	// leader-elector takes the port with a pod IP: it refuses it only for
	// its kubeconfig (exit 1), not its options (exit 2).
	cmd := exec.Command(binary, "--lease-name=x", "--kubeconfig=/nonexistent/kubeconfig")
	cmd.Env = []string{"POD_NAME=pod-0", "POD_NAMESPACE=ns", "POD_IP=10.0.0.7", "LEADER_ELECTOR_ADVERTISE_PORT=" + port}
	if out, err := cmd.CombinedOutput(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("leader-elector with the patched environment: %v\n%s", err, out)
	}
	dryRunApply(t, objs)
}

// dryRunApply creates the objects as a server-side dry run, namespaces
// first (a dry-run namespace does not exist for the objects in it, so
// those go to "default").
func dryRunApply(t *testing.T, objs packaging.Objects) {
	t.Helper()
	var out packaging.Objects
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue
		}
		u = u.DeepCopy()
		if u.GetNamespace() != "" {
			u.SetNamespace("default")
		}
		out = append(out, u)
	}
	if err := packaging.DryRunApply(context.Background(), controlPlane.AdminConfig(), out); err != nil {
		t.Fatal(err)
	}
}

// testChartDependencyTemplate: the template fragment's lines ("…" leaves
// some out) are, in order and as written, lines of the user's chart that
// test/packaging renders and checks (TestChartAsDependency).
func testChartDependencyTemplate(t *testing.T, b snippets.Block) {
	path := filepath.Join(repoRoot, "test", "packaging", "testdata", "my-app", "templates", "deployment.yaml")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	have := strings.Split(string(src), "\n")
	i := 0
	for _, line := range strings.Split(strings.TrimRight(b.Text, "\n"), "\n") {
		if strings.TrimSpace(line) == "…" {
			continue
		}
		for i < len(have) && have[i] != line {
			i++
		}
		if i == len(have) {
			t.Fatalf("%s: the line %q is not, in this order, in %s", b, line, path)
		}
		i++
	}
}

// testLeaderAnswerSample: the sample answer of GET /leader has exactly the
// fields (and those of "lease") of a real leader's answer, and decodes
// into the api package's type.
func testLeaderAnswerSample(t *testing.T, b snippets.Block) {
	lines := strings.Split(strings.TrimSpace(b.Text), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "$ curl -s localhost:4040/leader") {
		t.Fatalf("%s: want the curl command and its answer", b)
	}
	sample := []byte(lines[1])
	dec := json.NewDecoder(bytes.NewReader(sample))
	dec.DisallowUnknownFields()
	var typed api.Leader
	if err := dec.Decode(&typed); err != nil {
		t.Errorf("%s: the sample is not an api.Leader: %v", b, err)
	}
	g := newGroup(t, 1, candidateOptions{})
	leader := g.WaitLeader(giveUp)
	code, _, real, err := leader.do("GET", "/leader", nil)
	if err != nil || code != 200 {
		t.Fatalf("GET /leader: %d %v", code, err)
	}
	if got, want := jsonKeys(t, sample), jsonKeys(t, real); !slices.Equal(got, want) {
		t.Errorf("%s: the sample has the fields %v, a leader answers %v:\n%s", b, got, want, real)
	}
}

// jsonKeys lists an object's keys and, as parent.key, those of the objects
// in it, sorted.
func jsonKeys(t *testing.T, data []byte) []string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	var keys []string
	for k, v := range m {
		keys = append(keys, k)
		if inner, ok := v.(map[string]any); ok {
			for ik := range inner {
				keys = append(keys, k+"."+ik)
			}
		}
	}
	slices.Sort(keys)
	return keys
}
