package routing

import (
	"errors"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// ownedPod is a pod of ns with labels, controlled by the named object.
func ownedPod(labels map[string]string, apiVersion, kind, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: me, Namespace: ns, Labels: labels}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: owner, UID: "owner-uid", Controller: ptr.To(true)}}
	}
	return p
}

func TestCheckLeaderLabel(t *testing.T) {
	selector := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"cache"}}}}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "db-5d8", Namespace: ns}, Spec: appsv1.ReplicaSetSpec{Selector: selector}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: appsv1.StatefulSetSpec{Selector: selector}}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: appsv1.DaemonSetSpec{Selector: selector}}
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: batchv1.JobSpec{Selector: selector}}
	rc := &corev1.ReplicationController{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Spec: corev1.ReplicationControllerSpec{Selector: map[string]string{"app": "db"}}}
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		label string
		// forbid refuses reads of this resource, as the shipped Role does.
		forbid string
		taken  bool
	}{
		{name: "a label the pod does not carry, no controller", objs: []runtime.Object{ownedPod(nil, "", "", "")}, label: DefaultLeaderLabel},
		{name: "label mode's own values", objs: []runtime.Object{ownedPod(map[string]string{DefaultLeaderLabel: "false"}, "", "", "")}, label: DefaultLeaderLabel},
		{name: "the pod carries the label with another value", objs: []runtime.Object{ownedPod(map[string]string{"role": "primary"}, "", "", "")}, label: "role", taken: true},
		{name: "in the ReplicaSet's matchLabels", objs: []runtime.Object{ownedPod(nil, "apps/v1", "ReplicaSet", rs.Name), rs}, label: "app", taken: true},
		{name: "in the ReplicaSet's matchExpressions", objs: []runtime.Object{ownedPod(nil, "apps/v1", "ReplicaSet", rs.Name), rs}, label: "tier", taken: true},
		{name: "not in the ReplicaSet's selector", objs: []runtime.Object{ownedPod(nil, "apps/v1", "ReplicaSet", rs.Name), rs}, label: DefaultLeaderLabel},
		{name: "in the StatefulSet's selector", objs: []runtime.Object{ownedPod(nil, "apps/v1", "StatefulSet", sts.Name), sts}, label: "app", taken: true},
		{name: "in the DaemonSet's selector", objs: []runtime.Object{ownedPod(nil, "apps/v1", "DaemonSet", ds.Name), ds}, label: "tier", taken: true},
		{name: "in the Job's selector", objs: []runtime.Object{ownedPod(nil, "batch/v1", "Job", job.Name), job}, label: "app", taken: true},
		{name: "in the ReplicationController's selector", objs: []runtime.Object{ownedPod(nil, "v1", "ReplicationController", rc.Name), rc}, label: "app", taken: true},
		{name: "a controller kind it does not know", objs: []runtime.Object{ownedPod(nil, "example.com/v1", "Cluster", "db")}, label: "app"},
		{name: "the controller may not be read: skipped", objs: []runtime.Object{ownedPod(nil, "apps/v1", "ReplicaSet", rs.Name), rs}, label: "app", forbid: "replicasets"},
		{name: "the controller may not be read, but the pod's own label says it", objs: []runtime.Object{ownedPod(map[string]string{"app": "db"}, "apps/v1", "ReplicaSet", rs.Name), rs}, label: "app", forbid: "replicasets", taken: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			cs := fake.NewClientset(tc.objs...)
			if tc.forbid != "" {
				cs.PrependReactor("get", tc.forbid, func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: tc.forbid}, rs.Name, errors.New("RBAC"))
				})
			}
			err := CheckLeaderLabel(ctx, cs, ns, me, tc.label)
			if taken := errors.Is(err, ErrLeaderLabelTaken); taken != tc.taken || (!taken && err != nil) {
				t.Errorf("CheckLeaderLabel(%q): %v, want taken: %v", tc.label, err, tc.taken)
			}
		})
	}
	t.Run("the pod cannot be read: an error, not a refusal", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		err := CheckLeaderLabel(ctx, fake.NewClientset(), ns, me, DefaultLeaderLabel)
		if err == nil || errors.Is(err, ErrLeaderLabelTaken) {
			t.Errorf("CheckLeaderLabel without the pod: %v, want a plain error", err)
		}
	})
}

// TestLabelNeverOverwritesAForeignValue: a leader label that label mode
// did not write ("true" or "false") is someone else's: this pod's is never
// overwritten, another pod's is left alone.
func TestLabelNeverOverwritesAForeignValue(t *testing.T) {
	t.Run("on this pod", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newLabelWriter(t, newLeadership(leading(5)), pod(me, "primary", lease, 0))
		if err := w.publish(ctx, leading(5)); !errors.Is(err, ErrLeaderLabelTaken) {
			t.Errorf("publish: %v, want ErrLeaderLabelTaken", err)
		}
		if err := w.withdraw(ctx); !errors.Is(err, ErrLeaderLabelTaken) {
			t.Errorf("withdraw: %v, want ErrLeaderLabelTaken", err)
		}
		if got, _ := leaderLabel(t, cs, me); got != "primary" {
			t.Errorf("label overwritten with %q", got)
		}
	})
	t.Run("on another pod of the group", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newLabelWriter(t, newLeadership(leading(5)), pod(me, "false", lease, 0), pod("pod-b", "primary", lease, 4))
		if err := w.publish(ctx, leading(5)); err != nil {
			t.Fatal(err)
		}
		if got, _ := leaderLabel(t, cs, "pod-b"); got != "primary" {
			t.Errorf("pod-b's label overwritten with %q", got)
		}
		if got, _ := leaderLabel(t, cs, me); got != "true" {
			t.Errorf("this pod's label %q, want true", got)
		}
	})
}

// TestLabelPublishFencedItself: a newer leader has fenced this pod (its
// token is on it) but this pod has not seen the new term yet: it does not
// label itself.
func TestLabelPublishFencedItself(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, cs := newLabelWriter(t, newLeadership(leading(5)), pod(me, "false", lease, 6), leaseOf("pod-b", 6))
	if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
		t.Fatalf("publish: %v, want errStale", err)
	}
	if got, token := leaderLabel(t, cs, me); got != "false" || token != "6" {
		t.Errorf("this pod: label %q token %q, want false and 6", got, token)
	}
	if n := counterValue(t, w.metrics.refused.WithLabelValues(reasonNewerToken)); n != 1 {
		t.Errorf("fenced{newer_token} = %v, want 1", n)
	}
}
