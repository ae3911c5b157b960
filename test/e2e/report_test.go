//go:build integration

package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// ownedPod creates a Deployment with strategy, a ReplicaSet it owns and a
// pod the ReplicaSet owns, as the controllers would (no controller runs
// here), and returns the pod's name.
func ownedPod(t *testing.T, namespace, name string, strategy appsv1.DeploymentStrategy) string {
	t.Helper()
	ctx := context.Background()
	cs := controlPlane.AdminClient()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller creates the default ServiceAccount here; admission
	// wants the pod's.
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app": name}
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}
	d, err := cs.AppsV1().Deployments(namespace).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2), Strategy: strategy,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := cs.AppsV1().ReplicaSets(namespace).Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8", Labels: labels, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{
			Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod, err := cs.CoreV1().Pods(namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-5d8-x2k", Labels: labels, OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec:       podSpec,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod.Name
}

// waitLog waits until c's log contains want.
func waitLog(t *testing.T, c *candidate, want string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return strings.Contains(c.log(), want), nil
	}); err != nil {
		t.Fatalf("%s never logged %q", c.name, want)
	}
}

// TestStartupReport: every sidecar logs what its timings guarantee; with
// readiness leader it reads its pod's Deployment and warns when the
// Deployment's strategy cannot complete a rollout, stays quiet when it
// can, and says once that it cannot check when its RBAC does not allow it.
func TestStartupReport(t *testing.T) {
	t.Parallel()
	rolling := func(surge, unavailable string) appsv1.DeploymentStrategy {
		return appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxSurge: ptr.To(intstr.Parse(surge)), MaxUnavailable: ptr.To(intstr.Parse(unavailable)),
		}}
	}
	const warning = "The Deployment cannot complete a rollout with readiness=leader"
	t.Run("the default strategy: warned", func(t *testing.T) {
		const namespace = "report-default"
		pod := ownedPod(t, namespace, "app", rolling("25%", "25%"))
		c := startCandidate(t, pod, candidateOptions{lease: "app", namespace: namespace})
		waitLog(t, c, warning)
		waitLog(t, c, "Guarantees of these timings")
		for _, line := range strings.Split(c.log(), "\n") {
			if strings.Contains(line, "Guarantees of these timings") || strings.Contains(line, warning) {
				t.Log(line)
			}
		}
		for _, want := range []string{`crashTakeoverWithin="5.1s"`, `clockDriftMargin="50%"`, `apiOutageSurvived="1.5s"`} {
			if !strings.Contains(c.log(), want) {
				t.Errorf("the startup report lacks %s:\n%s", want, c.log())
			}
		}
	})
	t.Run("the shipped strategy: no warning", func(t *testing.T) {
		const namespace = "report-shipped"
		pod := ownedPod(t, namespace, "app", rolling("0", "100%"))
		c := startCandidate(t, pod, candidateOptions{lease: "app", namespace: namespace, extraArgs: []string{"-v=2"}})
		waitLog(t, c, "The Deployment's strategy can complete a rollout with readiness=leader")
		if strings.Contains(c.log(), warning) {
			t.Errorf("warned about the shipped strategy:\n%s", c.log())
		}
	})
	t.Run("the shipped RBAC cannot read the Deployment: said once", func(t *testing.T) {
		const namespace = "report-rbac"
		kubeconfig, lease := applyRBAC(t, namespace, nil, false)
		g := newGroup(t, 1, candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
		c := g.WaitLeader(giveUp)
		waitLog(t, c, "Not checking whether the Deployment can complete a rollout")
		if n := strings.Count(c.log(), "Not checking whether the Deployment"); n != 1 {
			t.Errorf("said %d times that it cannot check, want once", n)
		}
	})
}
