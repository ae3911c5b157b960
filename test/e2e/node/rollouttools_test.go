//go:build integration

package node_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestRolloutTools runs the rollout tools users run — the real
// `helm install --wait`, `helm upgrade --wait` and `kubectl rollout status`
// — against the chart's demo with each shipped strategy, and checks what
// docs/operations.md ("Rollouts when readiness means leadership") says
// they do:
//
//   - readiness leader (maxSurge 0, maxUnavailable 100%): helm's --wait
//     counts the Deployment as ready at once (Helm 3 expects
//     replicas − maxUnavailable = 0 Ready pods), so install and upgrade
//     return without waiting for a leader; `kubectl rollout status` waits
//     for every updated replica to be available, which never happens, and
//     fails when the Deployment's progress deadline passes.
//   - readiness candidate (maxSurge 1, maxUnavailable 0): helm's --wait
//     waits until every pod is Ready and `kubectl rollout status` succeeds.
func TestRolloutTools(t *testing.T) {
	t.Run("readiness leader", func(t *testing.T) {
		d, release := helmInstallWait(t, "rollout-leader")
		leader := d.waitSettled(t, d.settleTimeout())
		t.Logf("leader %s", leader)

		// rollout status waits for the follower to be available.
		out, err := d.rolloutStatus(t, 15*time.Second)
		if err == nil || !strings.Contains(out, "1 of 2 updated replicas are available") {
			t.Errorf("kubectl rollout status --timeout=15s: %v, want it still waiting for the 2nd replica to be available:\n%s", err, out)
		}
		// … until the progress deadline (600 s by default; 20 s here), when
		// it fails.
		d.kubectl(t, "patch", "deployment", d.deployment, "--type=merge", "-p", `{"spec":{"progressDeadlineSeconds":20}}`)
		began := time.Now()
		out, err = d.rolloutStatus(t, 2*time.Minute)
		took := since(began)
		if err == nil || !strings.Contains(out, "exceeded its progress deadline") {
			t.Errorf("kubectl rollout status with progressDeadlineSeconds 20: %v after %v, want it to fail with the progress deadline:\n%s", err, took, out)
		}
		t.Logf("MEASURED readiness leader: kubectl rollout status failed with the progress deadline (20 s) after %v", took)

		// helm upgrade --wait returns without waiting for the new pods.
		began = time.Now()
		helmWait(t, "upgrade", release, d.namespace, "--reuse-values", "--set", "election.retryPeriodSeconds=1")
		took = since(began)
		dep := d.get(t)
		t.Logf("MEASURED readiness leader: helm upgrade --wait returned in %v; then %d updated, %d ready, %d available of %d", took, dep.Status.UpdatedReplicas, dep.Status.ReadyReplicas, dep.Status.AvailableReplicas, *dep.Spec.Replicas)
		if took > 30*time.Second {
			t.Errorf("helm upgrade --wait took %v, want it to return at once (helm counts maxUnavailable 100%% as ready)", took)
		}
		leader = d.waitSettledExcept(t, d.settleTimeout(), leader)
		t.Logf("new leader %s", leader)
	})

	t.Run("readiness candidate", func(t *testing.T) {
		d, release := helmInstallWait(t, "rollout-candidate", "election.readiness=candidate")
		// helm waited for every pod to be Ready.
		dep := d.get(t)
		if dep.Status.ReadyReplicas != *dep.Spec.Replicas {
			t.Errorf("helm install --wait returned with %d of %d pods Ready, want all", dep.Status.ReadyReplicas, *dep.Spec.Replicas)
		}
		began := time.Now()
		if out, err := d.rolloutStatus(t, 2*time.Minute); err != nil || !strings.Contains(out, "successfully rolled out") {
			t.Errorf("kubectl rollout status: %v:\n%s", err, out)
		}
		t.Logf("MEASURED readiness candidate: kubectl rollout status after the install succeeded in %v", since(began))

		began = time.Now()
		helmWait(t, "upgrade", release, d.namespace, "--reuse-values", "--set", "election.retryPeriodSeconds=1")
		took := since(began)
		dep = d.get(t)
		if dep.Status.UpdatedReplicas != *dep.Spec.Replicas || dep.Status.ReadyReplicas < *dep.Spec.Replicas {
			t.Errorf("helm upgrade --wait returned with %d updated and %d Ready of %d, want all the new pods Ready", dep.Status.UpdatedReplicas, dep.Status.ReadyReplicas, *dep.Spec.Replicas)
		}
		t.Logf("MEASURED readiness candidate: helm upgrade --wait returned in %v with every new pod Ready", took)
		began = time.Now()
		if out, err := d.rolloutStatus(t, 2*time.Minute); err != nil || !strings.Contains(out, "successfully rolled out") {
			t.Errorf("kubectl rollout status after the upgrade: %v:\n%s", err, out)
		}
		t.Logf("MEASURED readiness candidate: kubectl rollout status after helm upgrade --wait succeeded in %v", since(began))
		d.waitLeads(t)
	})
}

// helmInstallWait runs the real `helm install --wait` of the chart's demo
// (with the node's image) in a new namespace and returns the deployment
// and the release's name. It fails unless helm succeeds within its
// --timeout; it logs how long helm took and what the Deployment showed
// when it returned.
func helmInstallWait(t *testing.T, namespace string, values ...string) (*deployment, string) {
	t.Helper()
	ctx := context.Background()
	const release = "demo"
	createRestrictedNamespace(t, namespace)
	args := chartDemoArgs(values)
	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), release, namespace, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	d := track(t, "helm install --wait "+strings.Join(values, " "), objs)
	began := time.Now()
	helmWait(t, "install", release, namespace, args...)
	dep := d.get(t)
	t.Logf("MEASURED %s: helm install --wait returned in %v; then %d ready, %d available of %d", namespace, since(began), dep.Status.ReadyReplicas, dep.Status.AvailableReplicas, *dep.Spec.Replicas)
	return d, release
}

// helmWait runs `helm install|upgrade --wait --timeout 3m` of the chart as
// the cluster's admin; a failure (helm's timeout included) fails the test.
func helmWait(t *testing.T, verb, release, namespace string, args ...string) {
	t.Helper()
	full := append([]string{verb, release, packaging.ChartDir(), "--namespace", namespace, "--wait", "--timeout", "3m",
		"--kubeconfig", theNode.ControlPlane().AdminKubeconfig()}, args...)
	if out, err := packaging.Run(context.Background(), "helm", full...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

func (d *deployment) get(t *testing.T) *appsv1.Deployment {
	t.Helper()
	dep, err := d.client.AppsV1().Deployments(d.namespace).Get(context.Background(), d.deployment, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dep
}

// rolloutStatus runs `kubectl rollout status` with --timeout and returns
// its output and exit error.
func (d *deployment) rolloutStatus(t *testing.T, timeout time.Duration) (string, error) {
	t.Helper()
	return d.runKubectl(t, "-n", d.namespace, "rollout", "status", "deployment/"+d.deployment, "--timeout="+timeout.String())
}

// kubectl runs kubectl in the deployment's namespace; a failure fails the
// test.
func (d *deployment) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.runKubectl(t, append([]string{"-n", d.namespace}, args...)...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// runKubectl runs the real kubectl as the cluster's admin (KUBECONFIG, as a
// user sets it) and returns its combined output and exit error.
func (d *deployment) runKubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+theNode.ControlPlane().AdminKubeconfig(), "KUBECACHEDIR="+t.TempDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
