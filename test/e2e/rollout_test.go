//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// The rollout tests run the shipped Deployments under the real Deployment
// and ReplicaSet controllers (kube-controller-manager at the API server's
// version). There is no node: a fake kubelet, driven from the test's own
// goroutine, runs a leader-elector process for every pod the ReplicaSet
// controller creates — configured as the pod's sidecar, with the pod's name
// and the shipped ServiceAccount's token — reports the pod Ready exactly
// when that sidecar's /readyz passes (the readiness probe), and on deletion
// sends SIGTERM, waits for the process and removes the pod. What is
// simulated is the kubelet; the controllers, the API server, admission and
// the sidecars are real.

// startControllerManager runs kube-controller-manager with only the
// Deployment and ReplicaSet controllers until the test ends.
func startControllerManager(t *testing.T) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubeTool(t, cluster.ControllerManager),
		"--kubeconfig="+controlPlane.AdminKubeconfig(),
		"--controllers=deployment-controller,replicaset-controller",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--secure-port=0",
		"-v=2")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			t.Logf("---- last lines of kube-controller-manager's log ----\n%s", strings.Join(lines, "\n"))
		}
	})
}

// fakeKubelet plays the kubelet for one namespace; see the comment above.
type fakeKubelet struct {
	t                     *testing.T
	namespace, kubeconfig string
	group                 *group
	pods                  map[string]*fakePod
}

type fakePod struct {
	c          *candidate
	hash       string // pod-template-hash: which ReplicaSet
	ready      *bool  // as last reported
	terminated bool   // SIGTERM sent
}

func newFakeKubelet(t *testing.T, namespace, kubeconfig, lease string) *fakeKubelet {
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	return &fakeKubelet{t: t, namespace: namespace, kubeconfig: kubeconfig, group: g, pods: map[string]*fakePod{}}
}

// sync does one round of the kubelet's work.
func (k *fakeKubelet) sync() {
	t := k.t
	t.Helper()
	ctx := context.Background()
	pods := controlPlane.AdminClient().CoreV1().Pods(k.namespace)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		listed[pod.Name] = true
		p, known := k.pods[pod.Name]
		if !known {
			if pod.DeletionTimestamp != nil {
				continue
			}
			binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod.Name}, Target: corev1.ObjectReference{Kind: "Node", Name: "fake-node"}}
			if err := pods.Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
				t.Fatalf("bind %s: %v", pod.Name, err)
			}
			p = &fakePod{c: fromPodTemplate(t, &pod.Spec, pod.Name, k.namespace, k.kubeconfig), hash: pod.Labels["pod-template-hash"]}
			k.pods[pod.Name] = p
			k.group.Add(p.c)
		}
		if pod.DeletionTimestamp != nil {
			if !p.terminated {
				p.c.signal(syscall.SIGTERM)
				p.terminated = true
			}
			if !p.c.running() {
				zero := int64(0)
				if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatalf("delete %s: %v", pod.Name, err)
				}
			}
			continue
		}
		code, _, err := p.c.probe("/readyz")
		ready := err == nil && code == 200
		if p.ready != nil && *p.ready == ready {
			continue
		}
		p.ready = &ready
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		now := metav1.Now()
		pod.Status.Phase = corev1.PodRunning
		pod.Status.StartTime = &now
		pod.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: status, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: now},
		}
		if _, err := pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			t.Fatalf("update status of %s: %v", pod.Name, err)
		} else if err != nil {
			p.ready = nil // try again next round
		}
	}
	for name, p := range k.pods {
		if !listed[name] {
			if p.c.running() {
				p.c.signal(syscall.SIGKILL)
			}
			delete(k.pods, name)
		}
	}
}

// leader returns the live pod whose sidecar says it leads, if exactly one does.
func (k *fakeKubelet) leader() (string, *fakePod) {
	var name string
	var found *fakePod
	n := 0
	for podName, p := range k.pods {
		if !p.c.running() || p.terminated {
			continue
		}
		if s, err := p.c.state(); err == nil && s.IsLeader {
			name, found = podName, p
			n++
		}
	}
	if n != 1 {
		return "", nil
	}
	return name, found
}

// hashes lists the ReplicaSets (pod-template-hash) of the pods not being deleted.
func (k *fakeKubelet) hashes() []string {
	var out []string
	for _, p := range k.pods {
		if !p.terminated {
			out = append(out, p.hash)
		}
	}
	slices.Sort(out)
	return out
}

// until runs the kubelet until cond holds or timeout passes.
func (k *fakeKubelet) until(timeout time.Duration, cond func() bool) error {
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		k.sync()
		return cond(), nil
	})
}

func deployment(t *testing.T, namespace, name string) *appsv1.Deployment {
	t.Helper()
	d, err := controlPlane.AdminClient().AppsV1().Deployments(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func progressingReason(d *appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			return c.Reason
		}
	}
	return ""
}

// rolloutSetUp applies objs (moved to namespace), starts the controllers and
// the fake kubelet, and waits until the Deployment's pods run and one leads.
func rolloutSetUp(t *testing.T, objs packaging.Objects, namespace string) (*fakeKubelet, *appsv1.Deployment) {
	t.Helper()
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	var leaseName string
	if u, err := objs.One("Lease"); err != nil {
		t.Fatal(err)
	} else {
		leaseName = u.GetName()
	}
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(context.Background(), namespace, d.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	startControllerManager(t)
	k := newFakeKubelet(t, namespace, kubeconfig, leaseName)
	replicas := int(*d.Spec.Replicas)
	if err := k.until(60*time.Second, func() bool {
		name, _ := k.leader()
		return len(k.hashes()) == replicas && name != ""
	}); err != nil {
		t.Fatalf("no %d pods with one leader: pods %v, deployment status %+v", replicas, k.hashes(), deployment(t, namespace, d.Name).Status)
	}
	return k, &d
}

// triggerRollout changes the pod template, as a new image would.
func triggerRollout(t *testing.T, namespace, name string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"leader-elector.test/rollout":%q}}}}}`, time.Now().Format(time.RFC3339Nano))
	if _, err := controlPlane.AdminClient().AppsV1().Deployments(namespace).Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestRolloutReadinessLeader: the example's strategy (maxSurge 0,
// maxUnavailable 100%) rolls every pod over although only the leader is ever
// Ready, and a pod of the new ReplicaSet ends up leading. As docs/operations.md
// says, the Deployment never reports the rollout complete (one available
// replica of two), which is what `kubectl rollout status` waits for.
func TestRolloutReadinessLeader(t *testing.T) {
	objs, err := packaging.KustomizeBuild(context.Background(), packaging.ManifestsDir("example"))
	if err != nil {
		t.Fatal(err)
	}
	k, d := rolloutSetUp(t, objs, "rollout-leader")
	before := k.hashes()
	oldLeader, _ := k.leader()
	began := time.Now()
	triggerRollout(t, d.Namespace, d.Name)
	var newLeader string
	err = k.until(90*time.Second, func() bool {
		hashes := k.hashes()
		newLeader, _ = k.leader()
		s := deployment(t, d.Namespace, d.Name).Status
		return len(hashes) == 2 && hashes[0] == hashes[1] && !slices.Contains(before, hashes[0]) &&
			newLeader != "" && s.UpdatedReplicas == 2 && s.Replicas == 2
	})
	if err != nil {
		t.Fatalf("the rollout did not finish: pods of ReplicaSets %v (before %v), leader %q, status %+v", k.hashes(), before, newLeader, deployment(t, d.Namespace, d.Name).Status)
	}
	fmt.Printf("MEASURED rollout with readiness leader: all pods replaced and %s (new) leads %v after the template changed (old leader %s); no kubelet, so no image pull or container start-up in that figure\n",
		newLeader, time.Since(began).Round(time.Millisecond), oldLeader)
	// The controller counts the new leader available once its readiness
	// has reached the pod's status: wait for that, not for a snapshot.
	var final *appsv1.Deployment
	_ = k.until(10*time.Second, func() bool {
		final = deployment(t, d.Namespace, d.Name)
		return final.Status.AvailableReplicas == 1
	})
	if final.Status.AvailableReplicas != 1 || progressingReason(final) == "NewReplicaSetAvailable" {
		t.Errorf("docs/operations.md says the Deployment never reports complete in this mode; status %+v", final.Status)
	}
}

// TestRolloutDefaultStrategyDeadlocks: the same Deployment with Kubernetes'
// default strategy (maxSurge 25%, maxUnavailable 25%) gets stuck, as
// docs/operations.md says: the new pod cannot become Ready while an old pod leads, so
// no old pod is ever removed.
func TestRolloutDefaultStrategyDeadlocks(t *testing.T) {
	objs, err := packaging.KustomizeBuild(context.Background(), packaging.ManifestsDir("example"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := objs.One("Deployment")
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructuredSet(u.Object, map[string]any{"type": "RollingUpdate"}, "spec", "strategy"); err != nil {
		t.Fatal(err)
	}
	k, d := rolloutSetUp(t, objs, "rollout-default")
	before := k.hashes()
	triggerRollout(t, d.Namespace, d.Name)
	// Long enough for the controllers to do all they will (the other
	// strategy finishes in a few seconds).
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		k.sync()
		time.Sleep(100 * time.Millisecond)
	}
	leader, p := k.leader()
	hashes := k.hashes()
	if p == nil || !slices.Contains(before, p.hash) || len(hashes) != 3 {
		t.Errorf("want the rollout stuck with the old leader %q still leading, two old pods and one new; pods of ReplicaSets %v (before %v)", leader, hashes, before)
	}
	t.Logf("stuck as expected: pods of ReplicaSets %v (old: %v), %s (old) leads, status %+v", hashes, before, leader, deployment(t, d.Namespace, d.Name).Status)
}

// TestRolloutReadinessCandidate: with readiness candidate the chart picks a
// one-by-one rolling update, which completes the way `kubectl rollout
// status` and `helm --wait` expect (every replica available), and a pod of
// the new ReplicaSet leads.
func TestRolloutReadinessCandidate(t *testing.T) {
	const namespace = "rollout-candidate"
	objs, err := packaging.HelmTemplate(context.Background(), packaging.ChartDir(), "cand", namespace, packaging.WithImage("--set", "demo.enabled=true", "--set", "election.readiness=candidate")...)
	if err != nil {
		t.Fatal(err)
	}
	restrictedNamespace(t, namespace)
	k, d := rolloutSetUp(t, objs, namespace)
	before := k.hashes()
	began := time.Now()
	triggerRollout(t, d.Namespace, d.Name)
	var leader string
	err = k.until(90*time.Second, func() bool {
		hashes := k.hashes()
		leader, _ = k.leader()
		dep := deployment(t, d.Namespace, d.Name)
		s := dep.Status
		return len(hashes) == 2 && hashes[0] == hashes[1] && !slices.Contains(before, hashes[0]) && leader != "" &&
			s.UpdatedReplicas == 2 && s.Replicas == 2 && s.AvailableReplicas == 2 && progressingReason(dep) == "NewReplicaSetAvailable"
	})
	if err != nil {
		t.Fatalf("the rollout did not complete: pods of ReplicaSets %v (before %v), leader %q, status %+v", k.hashes(), before, leader, deployment(t, d.Namespace, d.Name).Status)
	}
	fmt.Printf("MEASURED rollout with readiness candidate: complete (every replica available) and %s (new) leads %v after the template changed\n", leader, time.Since(began).Round(time.Millisecond))
}

func unstructuredSet(obj map[string]any, value any, fields ...string) error {
	m := obj
	for _, f := range fields[:len(fields)-1] {
		next, ok := m[f].(map[string]any)
		if !ok {
			return fmt.Errorf("no object at %s", f)
		}
		m = next
	}
	m[fields[len(fields)-1]] = value
	return nil
}
