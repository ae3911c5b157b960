package health

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestOwnPod: with CheckPod, a candidate whose pod is deleted never starts a term (and
// stops reading once it knows); a live pod is read before each new term;
// outside a pod, or without get on pods, it reads once and admits as before.
func TestOwnPod(t *testing.T) {
	pod := func(deleting bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: time.Unix(1000, 0)}
		}
		return p
	}
	for _, tc := range []struct {
		name      string
		objects   []runtime.Object
		forbidden bool
		// admits is Admit's answer each time, reads how many GETs three
		// Admits make.
		admits bool
		reads  int
	}{
		{"live pod", []runtime.Object{pod(false)}, false, true, 3},
		{"terminating pod", []runtime.Object{pod(true)}, false, false, 1},
		{"not a pod", nil, false, true, 1},
		{"no get on pods", []runtime.Object{pod(true)}, true, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset(tc.objects...)
			reads := 0
			client.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				reads++
				if tc.forbidden {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a", nil)
				}
				return false, nil, nil
			})
			h, err := New(Config{NameSuccessor: true, CheckPod: true, Period: time.Second, Failures: 1, Successes: 1,
				Namespace: "ns", Lease: "app", Identity: "a", LeaseDuration: time.Minute, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			g := h.Gate()
			for i := range 3 {
				if _, ok := g.Admit(); ok != tc.admits {
					t.Fatalf("Admit %d = %v, want %v", i+1, ok, tc.admits)
				}
			}
			if reads != tc.reads {
				t.Errorf("%d reads of the pod, want %d", reads, tc.reads)
			}
			// Without CheckPod: never read.
			reads = 0
			h, err = New(Config{NameSuccessor: true, Period: time.Second, Failures: 1, Successes: 1,
				Namespace: "ns", Lease: "app", Identity: "a", LeaseDuration: time.Minute, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := h.Gate().Admit(); !ok || reads != 0 {
				t.Errorf("without CheckPod: Admit = %v after %d reads, want true after none", ok, reads)
			}
			if g.Admits() != tc.admits {
				t.Errorf("Admits = %v, want %v", g.Admits(), tc.admits)
			}
		})
	}
}
