//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// The tests here install what the project ships — the Helm chart with
// `helm install`, the kustomize manifests with server-side apply of
// `kustomize build` — on the real API server, then run leader-elector
// processes exactly as the shipped pod templates configure the sidecar (the
// downward API played by the test), with the token of the shipped
// ServiceAccount. There is no kubelet: pods are checked by the API server's
// admission (server-side dry run), not run.

// applyServerSide applies objects as the admin with server-side apply and
// strict field validation.
func applyServerSide(t *testing.T, objs packaging.Objects) {
	t.Helper()
	if err := packaging.Apply(context.Background(), controlPlane.AdminConfig(), objs); err != nil {
		t.Fatal(err)
	}
}

// checkAdmitted creates a pod from the Deployment's template as a
// server-side dry run: the API server's admission (Pod Security, the
// ServiceAccount plugin) judges it as it would the ReplicaSet's pods. It then
// checks that admission left the token to the sidecar alone, and that a
// sidecar allowed to escalate privileges is refused (so the namespace does
// enforce Pod Security).
func checkAdmitted(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	ctx := context.Background()
	pods := controlPlane.AdminClient().CoreV1().Pods(d.Namespace)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: d.Name + "-", Labels: d.Spec.Template.Labels}, Spec: d.Spec.Template.Spec}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
	if err != nil {
		t.Fatalf("the API server refuses a pod of %s: %v", d.Name, err)
	}
	for _, c := range append(slices.Clone(created.Spec.InitContainers), created.Spec.Containers...) {
		mountsToken := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == packaging.TokenMountPath })
		if mountsToken != (c.Name == packaging.SidecarName) {
			t.Errorf("admitted pod: container %s mounts the ServiceAccount token: %v", c.Name, mountsToken)
		}
	}

	escalating := pod.DeepCopy()
	sc, _, err := packaging.Sidecar(&escalating.Spec)
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	sc.SecurityContext.AllowPrivilegeEscalation = &yes
	_, err = pods.Create(ctx, escalating, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Errorf("a sidecar with allowPrivilegeEscalation in namespace %s: %v, want refused by Pod Security", d.Namespace, err)
	}
}

// restrictedNamespace creates a namespace that enforces Pod Security
// "restricted", as the example's own namespace does.
func restrictedNamespace(t *testing.T, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// shippedHandoverBound is handoverBound at the retry period the sidecar in
// spec runs with (the shipped manifests', not the suite's): client-go's
// longest wait between two attempts at that period, plus e2eSlack.
func shippedHandoverBound(t *testing.T, spec *corev1.PodSpec) time.Duration {
	t.Helper()
	sc, _, err := packaging.Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	retry := 2 * time.Second // the sidecar's default
	v, ok := packaging.FlagValue(sc.Args, "retry-period")
	if !ok {
		v, ok = packaging.EnvValue(sc, "LEADER_ELECTOR_RETRY_PERIOD")
	}
	if ok {
		if retry, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	return maxRetryWaitAt(retry) + e2eSlack
}

// fromPodTemplate starts leader-elector configured exactly as the sidecar
// in spec: its arguments and environment, with the downward API's values
// for a pod named podName in namespace, on free local ports instead of the
// pod's, and with kubeconfig instead of the in-cluster configuration.
func fromPodTemplate(t *testing.T, spec *corev1.PodSpec, podName, namespace, kubeconfig string, extraArgs ...string) *candidate {
	t.Helper()
	ports := harnesstest.FreePorts(t, 2)
	args, env := podTemplateCommand(t, spec, podName, namespace, kubeconfig, ports, extraArgs...)
	return startCandidate(t, podName, candidateOptions{bareArgs: true, extraArgs: args, env: env, ports: ports})
}

// podTemplateCommand is the arguments and environment fromPodTemplate runs
// leader-elector with, on ports.
func podTemplateCommand(t *testing.T, spec *corev1.PodSpec, podName, namespace, kubeconfig string, ports []int, extraArgs ...string) (args, env []string) {
	t.Helper()
	sc, _, err := packaging.Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	args = slices.DeleteFunc(slices.Clone(sc.Args), func(a string) bool {
		return strings.HasPrefix(a, "--http-address=") || strings.HasPrefix(a, "--probe-address=") || strings.HasPrefix(a, "--kubeconfig=")
	})
	args = append(args,
		fmt.Sprintf("--http-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--probe-address=127.0.0.1:%d", ports[1]),
		"--kubeconfig="+kubeconfig)
	args = append(args, extraArgs...)
	for _, e := range sc.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, e.Name+"="+podName)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			env = append(env, e.Name+"="+namespace)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			env = append(env, e.Name+"="+podIP(podName))
		case e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory":
			limit := sc.Resources.Limits[corev1.ResourceMemory]
			env = append(env, fmt.Sprintf("%s=%d", e.Name, limit.Value()))
		default:
			t.Fatalf("the sidecar's env %s comes from %+v, which this test cannot play", e.Name, e.ValueFrom)
		}
	}
	return args, env
}

// electAndHandOver runs two candidates from the pod template with the
// ServiceAccount's token: one leads, the Lease names it, and on SIGTERM it
// releases and the other takes over. Nothing is refused along the way.
func electAndHandOver(t *testing.T, spec *corev1.PodSpec, namespace, lease, kubeconfig string) (*group, *candidate) {
	t.Helper()
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for _, pod := range []string{"pod-a", "pod-b"} {
		g.Add(fromPodTemplate(t, spec, pod, namespace, kubeconfig))
	}
	leader := g.WaitLeader(giveUp)
	if holder := harnesstest.LeaseHolder(t, controlPlane, namespace, lease); holder != leader.name {
		t.Errorf("the Lease names %q, %s leads", holder, leader.name)
	}
	leader.signal(syscall.SIGTERM)
	if code, err := leader.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	next := g.WaitLeader(shippedHandoverBound(t, spec), leader)
	for _, c := range g.Members() {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something with the shipped RBAC:\n%s", c.name, c.log())
		}
	}
	return g, next
}

// checkRefused: the token that elects on the Lease gets nothing else — not
// another Lease, not its own Lease in another namespace, not pods or
// secrets, not even a list of Leases or deleting its own. And a sidecar
// pointed at another Lease or namespace with it is refused and never leads.
func checkRefused(t *testing.T, spec *corev1.PodSpec, namespace, lease, kubeconfig string) {
	t.Helper()
	ctx := context.Background()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	leases := cs.CoordinationV1().Leases(namespace)
	if _, err := leases.Get(ctx, lease, metav1.GetOptions{}); err != nil {
		t.Fatalf("the token cannot read its own Lease: %v", err)
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "another-lease"}}
	for what, call := range map[string]func() error{
		"get another Lease":    func() error { _, err := leases.Get(ctx, "another-lease", metav1.GetOptions{}); return err },
		"create another Lease": func() error { _, err := leases.Create(ctx, other, metav1.CreateOptions{}); return err },
		"list Leases":          func() error { _, err := leases.List(ctx, metav1.ListOptions{}); return err },
		"delete its Lease":     func() error { return leases.Delete(ctx, lease, metav1.DeleteOptions{}) },
		"get its Lease in default": func() error {
			_, err := cs.CoordinationV1().Leases("default").Get(ctx, lease, metav1.GetOptions{})
			return err
		},
		"create a Lease in default": func() error {
			_, err := cs.CoordinationV1().Leases("default").Create(ctx, other, metav1.CreateOptions{})
			return err
		},
		"list pods":                 func() error { _, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{}); return err },
		"get a pod":                 func() error { _, err := cs.CoreV1().Pods(namespace).Get(ctx, "pod-a", metav1.GetOptions{}); return err },
		"list secrets":              func() error { _, err := cs.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{}); return err },
		"list namespaces (cluster)": func() error { _, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); return err },
		"watch Leases in default (all)": func() error {
			w, err := cs.CoordinationV1().Leases("default").Watch(ctx, metav1.ListOptions{})
			stopWatch(w)
			return err
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s with the sidecar's token: %v, want forbidden", what, err)
		}
	}

	for _, tc := range []struct{ name, arg string }{
		{"another Lease", "--lease-name=another-lease"},
		{"another namespace", "--lease-namespace=default"},
	} {
		c := fromPodTemplate(t, spec, "stray", namespace, kubeconfig, tc.arg)
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			return strings.Contains(c.log(), "forbidden"), nil
		}); err != nil {
			t.Errorf("%s: no 'forbidden' in the log:\n%s", tc.name, c.log())
		}
		if err := holdsFor(3*time.Second, 100*time.Millisecond, func() error {
			if s, err := c.state(); err != nil || s.IsLeader {
				return fmt.Errorf("state %+v, %v: led with a token for another Lease", s, err)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		c.signal(syscall.SIGKILL)
		_, _ = c.waitExit(giveUp)
	}
}

type stopper interface{ Stop() }

func stopWatch(w stopper) {
	if w != nil {
		w.Stop()
	}
}

// TestHelmInstall: `helm install` of the chart with its demo workload
// against the real API server; the demo's pods pass admission in a
// namespace that enforces Pod Security restricted; sidecars configured as
// the chart configures them, with the chart's ServiceAccount token, elect a
// leader and hand over; the token can do nothing else; `helm upgrade` while
// one leads leaves its term alone; `helm uninstall` removes it all.
func TestHelmInstall(t *testing.T) {
	t.Parallel()
	const namespace, release = "helm-e2e", "e2e"
	ctx := context.Background()
	restrictedNamespace(t, namespace)
	helm := func(args ...string) string {
		t.Helper()
		out, err := packaging.Run(ctx, "helm", append(args, "--kubeconfig", controlPlane.AdminKubeconfig(), "--namespace", namespace)...)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	out := helm(append([]string{"install", release, packaging.ChartDir()}, packaging.WithImage("--set", "demo.enabled=true")...)...)
	fullname := release + "-leader-elector"
	for _, want := range []string{
		"STATUS: deployed",
		"kubectl -n " + namespace + " get lease " + fullname + " -o jsonpath='{.spec.holderIdentity}",
		"kubectl -n " + namespace + " exec deploy/" + fullname + "-demo -c app -- wget -qO- http://127.0.0.1:4040/leader",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("helm install printed no %q:\n%s", want, out)
		}
	}

	cs := controlPlane.AdminClient()
	d, err := cs.AppsV1().Deployments(namespace).Get(ctx, fullname+"-demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &d.Spec.Template.Spec
	for _, err := range packaging.CheckSidecarPod(spec, true) {
		t.Errorf("as stored by the API server: %v", err)
	}
	checkAdmitted(t, d)

	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	_, leader := electAndHandOver(t, spec, namespace, fullname, kubeconfig)
	checkRefused(t, spec, namespace, fullname, kubeconfig)

	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	helm(append([]string{"upgrade", release, packaging.ChartDir()}, packaging.WithImage("--set", "demo.enabled=true", "--set", "demo.replicas=3")...)...)
	// Three renewals later, the same term.
	time.Sleep(3 * 2 * time.Second)
	after, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	if !after.IsLeader || after.FencingToken != before.FencingToken || harnesstest.LeaseHolder(t, controlPlane, namespace, fullname) != leader.name {
		t.Errorf("helm upgrade disturbed the leader: before %+v, after %+v", before, after)
	}
	// Stop the candidates, then uninstall: the Role goes, the Lease stays
	// (resource-policy: keep), so that the next install continues its
	// tokens; a fresh install's sidecars start above every earlier token.
	last, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*candidate{leader} {
		c.signal(syscall.SIGTERM)
		c.waitExit(giveUp)
	}
	helm("uninstall", release)
	if _, err := cs.RbacV1().Roles(namespace).Get(ctx, fullname, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after helm uninstall, Role: %v, want not found", err)
	}
	if _, err := cs.CoordinationV1().Leases(namespace).Get(ctx, fullname, metav1.GetOptions{}); err != nil {
		t.Errorf("after helm uninstall, Lease: %v, want kept", err)
	}
	helm(append([]string{"install", release, packaging.ChartDir()}, packaging.WithImage("--set", "demo.enabled=true")...)...)
	kubeconfig, err = controlPlane.ServiceAccountKubeconfig(ctx, namespace, spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := electAndHandOver(t, spec, namespace, fullname, kubeconfig)
	next := g.WaitLeader(giveUp)
	again, err := next.state()
	if err != nil {
		t.Fatal(err)
	}
	if again.FencingToken <= last.FencingToken {
		t.Errorf("after helm uninstall and install, fencing token %d, was %d", again.FencingToken, last.FencingToken)
	}
}

// TestHelmInstallWithoutLease: with lease.create=false the chart's Role may
// create Leases, and the first sidecar creates its own.
func TestHelmInstallWithoutLease(t *testing.T) {
	t.Parallel()
	const namespace, release = "helm-e2e-nolease", "e2e"
	ctx := context.Background()
	restrictedNamespace(t, namespace)
	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), release, namespace, packaging.WithImage("--set", "demo.enabled=true", "--set", "lease.create=false")...)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.OfKind("Lease")) != 0 {
		t.Fatalf("lease.create=false rendered a Lease")
	}
	applyServerSide(t, objs)
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, d.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	c := fromPodTemplate(t, &d.Spec.Template.Spec, "pod-a", namespace, kubeconfig)
	g := groupOf(t, "", c)
	g.WaitLeader(giveUp)
	if holder := harnesstest.LeaseHolder(t, controlPlane, namespace, release+"-leader-elector"); holder != "pod-a" {
		t.Errorf("the Lease the sidecar created names %q", holder)
	}
}

// TestKustomizeExample: the output of `kustomize build manifests/example`
// (what `kubectl apply -k` applies) is accepted by the API server with
// strict validation, its pods pass Pod Security restricted, sidecars
// configured as the example configures them elect and hand over with its
// ServiceAccount's token, the token can do nothing else, and applying the
// manifests again while one leads leaves its term alone. The pre-1.29
// variant is accepted too, and its sidecar leads the same way.
func TestKustomizeExample(t *testing.T) {
	ctx := context.Background()
	objs, err := packaging.KustomizeBuild(ctx, packaging.ManifestsDir("example"))
	if err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	var d appsv1.Deployment
	var lease coordinationv1.Lease
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	if err := objs.OneInto("Lease", &lease); err != nil {
		t.Fatal(err)
	}
	stored, err := controlPlane.AdminClient().AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := &stored.Spec.Template.Spec
	for _, err := range packaging.CheckSidecarPod(spec, true) {
		t.Errorf("as stored by the API server: %v", err)
	}
	checkAdmitted(t, stored)

	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, d.Namespace, spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	_, leader := electAndHandOver(t, spec, d.Namespace, lease.Name, kubeconfig)
	checkRefused(t, spec, d.Namespace, lease.Name, kubeconfig)

	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	time.Sleep(3 * 2 * time.Second)
	after, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	if !after.IsLeader || after.FencingToken != before.FencingToken || harnesstest.LeaseHolder(t, controlPlane, d.Namespace, lease.Name) != leader.name {
		t.Errorf("applying the manifests again disturbed the leader: before %+v, after %+v", before, after)
	}

	t.Run("pre-1.29", func(t *testing.T) {
		objs, err := packaging.KustomizeBuild(ctx, packaging.ManifestsDir("example-pre-1.29"))
		if err != nil {
			t.Fatal(err)
		}
		const namespace = "leader-elector-example-pre-129"
		if err := packaging.InNamespace(objs, namespace); err != nil {
			t.Fatal(err)
		}
		applyServerSide(t, objs)
		var d appsv1.Deployment
		if err := objs.OneInto("Deployment", &d); err != nil {
			t.Fatal(err)
		}
		checkAdmitted(t, &d)
		kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, d.Spec.Template.Spec.ServiceAccountName)
		if err != nil {
			t.Fatal(err)
		}
		c := fromPodTemplate(t, &d.Spec.Template.Spec, "pod-a", namespace, kubeconfig)
		groupOf(t, "", c).WaitLeader(giveUp)
	})
}
