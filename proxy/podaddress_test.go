package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func candidatePod(name, sa, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       corev1.PodSpec{ServiceAccountName: sa},
		Status:     corev1.PodStatus{PodIP: ip},
	}
}

// TestPodAddresses: the holder's pod IP, if it runs as this pod's
// ServiceAccount; connections that resolve one new leader at once share
// one read of its pod; a known holder and term costs no read.
func TestPodAddresses(t *testing.T) {
	client := fake.NewSimpleClientset(
		candidatePod("self", "app", "10.0.0.1"),
		candidatePod("leader", "app", "10.0.0.2"),
		candidatePod("other", "intruder", "10.0.0.3"),
		candidatePod("pending", "app", ""),
	)
	var gets atomic.Int32
	release := make(chan struct{})
	client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "leader" {
			gets.Add(1)
			<-release
		}
		return false, nil, nil
	})
	a := &PodAddresses{Pods: client.CoreV1().Pods("default"), Self: "self"}
	ctx := context.Background()

	var wg sync.WaitGroup
	hosts := make([]string, 8)
	errs := make([]error, 8)
	for i := range hosts {
		wg.Go(func() { hosts[i], errs[i] = a.Resolve(ctx, "leader", 3) })
	}
	for gets.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	// The other seven call Resolve meanwhile; without the shared read
	// each would read the pod too.
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	for i := range hosts {
		if errs[i] != nil || hosts[i] != "10.0.0.2" {
			t.Errorf("resolve %d: %q, %v; want 10.0.0.2", i, hosts[i], errs[i])
		}
	}
	if n := gets.Load(); n != 1 {
		t.Errorf("8 connections at once read the leader's pod %d times, want 1", n)
	}
	if h, err := a.Resolve(ctx, "leader", 3); err != nil || h != "10.0.0.2" || gets.Load() != 1 {
		t.Errorf("the known holder: %q, %v after %d reads; want no new read", h, err, gets.Load())
	}
	if _, err := a.Resolve(ctx, "other", 4); err == nil {
		t.Error("a pod of another ServiceAccount was resolved")
	}
	if _, err := a.Resolve(ctx, "pending", 5); err == nil {
		t.Error("a pod without an IP was resolved")
	}
	if _, err := a.Resolve(ctx, "gone", 6); err == nil {
		t.Error("a pod that does not exist was resolved")
	}
}
