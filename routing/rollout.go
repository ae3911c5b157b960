package routing

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// RolloutCheck is what CheckRollout found out about the Deployment that
// owns a pod whose readiness means leadership.
type RolloutCheck struct {
	// Deployment is the owning Deployment's name; "" if the pod is not
	// owned by one (then there is nothing to check).
	Deployment string
	// Problem says why a rollout of that Deployment cannot complete while
	// only the leader is Ready; "" if it can.
	Problem string
}

// CheckRollout follows pod → ReplicaSet → Deployment and judges the
// Deployment's strategy for --readiness=leader, where only one pod is ever
// Ready. It needs get on pods, replicasets and deployments; the error says
// what was refused.
func CheckRollout(ctx context.Context, client kubernetes.Interface, namespace, podName string) (RolloutCheck, error) {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return RolloutCheck{}, fmt.Errorf("get pod %s/%s: %w", namespace, podName, err)
	}
	rsRef := metav1.GetControllerOf(pod)
	if rsRef == nil || rsRef.Kind != "ReplicaSet" {
		return RolloutCheck{}, nil
	}
	rs, err := client.AppsV1().ReplicaSets(namespace).Get(ctx, rsRef.Name, metav1.GetOptions{})
	if err != nil {
		return RolloutCheck{}, fmt.Errorf("get replicaset %s/%s: %w", namespace, rsRef.Name, err)
	}
	dRef := metav1.GetControllerOf(rs)
	if dRef == nil || dRef.Kind != "Deployment" {
		return RolloutCheck{}, nil
	}
	d, err := client.AppsV1().Deployments(namespace).Get(ctx, dRef.Name, metav1.GetOptions{})
	if err != nil {
		return RolloutCheck{}, fmt.Errorf("get deployment %s/%s: %w", namespace, dRef.Name, err)
	}
	return RolloutCheck{Deployment: d.Name, Problem: LeaderOnlyRolloutProblem(d)}, nil
}

// LeaderOnlyRolloutProblem says why a rollout of d cannot complete when at
// most one pod (the leader) is ever available, or "" if it can. A rolling
// update keeps at least replicas − maxUnavailable pods available; with
// that at one or more, the old leader is the one available pod and is never
// removed, and no new pod can become available while it leads.
func LeaderOnlyRolloutProblem(d *appsv1.Deployment) string {
	if d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		return ""
	}
	replicas := int32(1)
	if d.Spec.Replicas != nil {
		replicas = *d.Spec.Replicas
	}
	if replicas == 0 {
		return ""
	}
	maxUnavailable := intstr.FromString("25%")
	maxSurge := intstr.FromString("25%")
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		if ru.MaxUnavailable != nil {
			maxUnavailable = *ru.MaxUnavailable
		}
		if ru.MaxSurge != nil {
			maxSurge = *ru.MaxSurge
		}
	}
	// As the Deployment controller resolves them: surge rounds up,
	// unavailable rounds down, and both zero means one unavailable.
	surge, err1 := intstr.GetScaledValueFromIntOrPercent(&maxSurge, int(replicas), true)
	unavailable, err2 := intstr.GetScaledValueFromIntOrPercent(&maxUnavailable, int(replicas), false)
	if err1 != nil || err2 != nil {
		return ""
	}
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	if unavailable >= int(replicas) {
		return ""
	}
	return fmt.Sprintf("with %d replicas and maxUnavailable %s (%d), a rolling update waits for %d available pods, but only the leader is ever Ready: the rollout cannot complete; use maxSurge 0 and maxUnavailable 100%%, the Recreate strategy, or --readiness=candidate with a --route mode",
		replicas, maxUnavailable.String(), unavailable, int(replicas)-unavailable)
}
