package routing

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func deployment(replicas int32, strategy appsv1.DeploymentStrategy) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, UID: "d-uid"},
		Spec:       appsv1.DeploymentSpec{Replicas: ptr.To(replicas), Strategy: strategy},
	}
}

func rolling(surge, unavailable string) appsv1.DeploymentStrategy {
	s := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{}}
	if surge != "" {
		s.RollingUpdate.MaxSurge = ptr.To(intstr.Parse(surge))
	}
	if unavailable != "" {
		s.RollingUpdate.MaxUnavailable = ptr.To(intstr.Parse(unavailable))
	}
	return s
}

func TestLeaderOnlyRolloutProblem(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         *appsv1.Deployment
		completes bool
	}{
		{"the shipped strategy: maxSurge 0, maxUnavailable 100%", deployment(2, rolling("0", "100%")), true},
		{"Recreate", deployment(3, appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}), true},
		{"maxUnavailable equal to replicas", deployment(3, rolling("1", "3")), true},
		{"the default strategy (25%/25%), 2 replicas", deployment(2, appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType}), false},
		{"the default strategy, 1 replica", deployment(1, rolling("", "")), false},
		{"maxSurge 1, maxUnavailable 0", deployment(2, rolling("1", "0")), false},
		{"maxUnavailable one short of replicas", deployment(3, rolling("0", "2")), false},
		{"99% of 2 rounds down to 1", deployment(2, rolling("0", "99%")), false},
		{"both zero mean one unavailable: enough for 1 replica", deployment(1, rolling("0", "0")), true},
		{"scaled to zero", deployment(0, rolling("1", "0")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problem := LeaderOnlyRolloutProblem(tc.d)
			if (problem == "") != tc.completes {
				t.Errorf("problem %q, want a rollout that completes: %v", problem, tc.completes)
			}
		})
	}
}

func TestCheckRollout(t *testing.T) {
	d := deployment(2, rolling("1", "0"))
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "app-5d8", Namespace: ns, UID: "rs-uid",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "app", UID: "d-uid", Controller: ptr.To(true)}}}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: me, Namespace: ns,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "app-5d8", UID: "rs-uid", Controller: ptr.To(true)}}}}

	t.Run("a Deployment whose rollout cannot complete", func(t *testing.T) {
		check, err := CheckRollout(context.Background(), fake.NewClientset(d, rs, p), ns, me)
		if err != nil || check.Deployment != "app" || !strings.Contains(check.Problem, "cannot complete") {
			t.Errorf("CheckRollout = %+v, %v", check, err)
		}
	})
	t.Run("a pod without an owner", func(t *testing.T) {
		check, err := CheckRollout(context.Background(), fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: me, Namespace: ns}}), ns, me)
		if err != nil || check != (RolloutCheck{}) {
			t.Errorf("CheckRollout = %+v, %v", check, err)
		}
	})
	t.Run("forbidden", func(t *testing.T) {
		cs := fake.NewClientset(d, rs, p)
		cs.PrependReactor("get", "replicasets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "app-5d8", nil)
		})
		if _, err := CheckRollout(context.Background(), cs, ns, me); !apierrors.IsForbidden(err) {
			t.Errorf("CheckRollout: %v, want forbidden", err)
		}
	})
}
