package leaseevents

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

const (
	testNamespace = "default"
	testName      = "my-app"
)

var eventsResource = schema.GroupResource{Resource: "events"}

// leaseSubject is the object client-go's LeaseLock records Events about.
func leaseSubject() *coordinationv1.Lease {
	return &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{Kind: "Lease", APIVersion: "coordination.k8s.io/v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName, UID: "lease-uid", ResourceVersion: "7"},
	}
}

// countCreates makes every create of an Event answer with err (nil: the
// fake stores it) after delay, and counts the attempts.
func countCreates(cs *fake.Clientset, delay time.Duration, err error) *atomic.Int32 {
	var n atomic.Int32
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		time.Sleep(delay)
		return err != nil, nil, err
	})
	return &n
}

func TestEventRecorderWritesTheEventBeforeClose(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	cs := fake.NewClientset()
	attempts := countCreates(cs, 200*time.Millisecond, nil)
	r := New(ctx, cs, "pod-a")
	r.Eventf(leaseSubject(), corev1.EventTypeNormal, "LeaderElection", "%s became leader (fencing token %d)", "pod-a", 4)
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d attempts to write the Event, want 1", n)
	}
	list, err := cs.CoreV1().Events(testNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("Events after Close: %v, %v; want the one recorded", list, err)
	}
	ev := list.Items[0]
	ref := ev.InvolvedObject
	if ref.Kind != "Lease" || ref.APIVersion != "coordination.k8s.io/v1" || ref.Name != testName || ref.Namespace != testNamespace || ref.UID != "lease-uid" {
		t.Errorf("the Event is about %+v, want the Lease with its UID (kubectl describe matches on it)", ref)
	}
	if ev.Reason != "LeaderElection" || ev.Message != "pod-a became leader (fencing token 4)" || ev.Type != corev1.EventTypeNormal {
		t.Errorf("Event %s %s %q", ev.Type, ev.Reason, ev.Message)
	}
	if ev.Source.Component != Component || ev.ReportingController != Component || ev.ReportingInstance != "pod-a" || ev.Count != 1 {
		t.Errorf("Event source %+v, reporting %s/%s, count %d", ev.Source, ev.ReportingController, ev.ReportingInstance, ev.Count)
	}
	if !strings.HasPrefix(ev.Name, testName+".") || ev.Namespace != testNamespace {
		t.Errorf("Event named %s/%s, want %s/%s.<time>", ev.Namespace, ev.Name, testNamespace, testName)
	}
}

func TestEventRecorderRetriesOnlyWhileTheAPIServerIsUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int32
	}{
		{"forbidden", apierrors.NewForbidden(eventsResource, "", nil), 1},
		{"invalid", apierrors.NewBadRequest("no"), 1},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), eventAttempts},
		{"internal error", apierrors.NewInternalError(context.DeadlineExceeded), eventAttempts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			cs := fake.NewClientset()
			attempts := countCreates(cs, 0, tc.err)
			r := New(ctx, cs, "pod-a")
			r.retryWait = time.Millisecond
			r.Eventf(leaseSubject(), corev1.EventTypeNormal, "LeaderElection", "pod-a became leader")
			if err := r.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if n := attempts.Load(); n != tc.want {
				t.Errorf("%d attempts, want %d", n, tc.want)
			}
		})
	}
}

// An API server that does not answer: recording neither blocks the caller
// nor grows without bound, and Close gives up when its context ends.
func TestEventRecorderNeverBlocksTheElection(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	cs := fake.NewClientset()
	stuck := make(chan struct{})
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		<-stuck
		return true, nil, apierrors.NewServiceUnavailable("gone")
	})
	r := New(ctx, cs, "pod-a")
	// Once the test ends the writer gives up on what is queued at once,
	// rather than retrying it for a minute after the test (the write is
	// before its first read: that read follows the close of stuck).
	r.retryWait = 0
	t.Cleanup(func() {
		close(stuck)
		select {
		case <-r.written:
		case <-time.After(5 * time.Second):
			t.Error("the writer still retried 5 s after the test")
		}
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 10 * eventQueueLength {
			r.Eventf(leaseSubject(), corev1.EventTypeNormal, "LeaderElection", "event %d", i)
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Eventf blocked while the API server did not answer")
	}
	if n := len(r.queue); n > eventQueueLength {
		t.Errorf("%d Events queued, want at most %d", n, eventQueueLength)
	}
	closeCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := r.Close(closeCtx); err == nil {
		t.Error("Close returned nil while the Events could not be written")
	}
	// Recorded after Close: dropped, not a send on a closed channel.
	r.Eventf(leaseSubject(), corev1.EventTypeNormal, "LeaderElection", "late")
}

func TestEventRecorderRefusesAnObjectWithoutReference(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cs := fake.NewClientset()
	attempts := countCreates(cs, 0, nil)
	r := New(ctx, cs, "pod-a")
	r.Eventf(&runtime.Unknown{}, corev1.EventTypeNormal, "LeaderElection", "about nothing")
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if n := attempts.Load(); n != 0 {
		t.Errorf("%d attempts to write an Event about an object without a reference", n)
	}
}
