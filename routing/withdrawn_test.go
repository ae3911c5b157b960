package routing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/leadership"
)

// endTermSlack is how long, beyond the router's first reconciliation, a
// loaded test machine may take to schedule it.
const endTermSlack = 5 * time.Second

// endingLeadership is a fakeLeadership that can end a term, as the
// elector's ReleaseTerm does.
type endingLeadership struct {
	*fakeLeadership
	mu    sync.Mutex
	ended []int64
}

func (e *endingLeadership) ReleaseTerm(_ context.Context, token int64) (leadership.State, error) {
	e.mu.Lock()
	e.ended = append(e.ended, token)
	e.mu.Unlock()
	e.set(following("", token))
	return e.Snapshot(), nil
}

func (e *endingLeadership) endedTerms() []int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]int64(nil), e.ended...)
}

// refuseSameTokenSlice answers an update of the slice as the
// route-endpointslice admission policy does: under the token the slice
// carries, its endpoints may only be emptied or kept.
func refuseSameTokenSlice(cs *fake.Clientset) {
	gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	cs.PrependReactor("update", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updated := a.(k8stesting.UpdateAction).GetObject().(*discoveryv1.EndpointSlice)
		obj, err := cs.Tracker().Get(gvr, updated.Namespace, updated.Name)
		if err != nil {
			return false, nil, nil
		}
		old := obj.(*discoveryv1.EndpointSlice)
		if old.Annotations[FencingTokenAnnotation] == updated.Annotations[FencingTokenAnnotation] &&
			len(updated.Endpoints) > 0 && !equality.Semantic.DeepEqual(old.Endpoints, updated.Endpoints) {
			return true, nil, apierrors.NewForbidden(gvr.GroupResource(), updated.Name, errors.New("ValidatingAdmissionPolicy denied request: same token"))
		}
		return false, nil, nil
	})
}

// refuseSameTokenLeader answers a patch of a pod as the label-mode
// admission policy does: labelling a pod leader needs a new token.
func refuseSameTokenLeader(cs *fake.Clientset) {
	cs.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		obj, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), p.GetNamespace(), p.GetName())
		if err != nil {
			return false, nil, nil
		}
		old := obj.(*corev1.Pod)
		labelsLeader := strings.Contains(string(p.GetPatch()), `"`+DefaultLeaderLabel+`":"true"`)
		keepsToken := !strings.Contains(string(p.GetPatch()), FencingTokenAnnotation) ||
			strings.Contains(string(p.GetPatch()), `"`+FencingTokenAnnotation+`":"`+old.Annotations[FencingTokenAnnotation]+`"`)
		if labelsLeader && old.Labels[DefaultLeaderLabel] != "true" && keepsToken {
			return true, nil, apierrors.NewForbidden(corev1.Resource("pods"), p.GetName(), errors.New("ValidatingAdmissionPolicy denied request: same token"))
		}
		return false, nil, nil
	})
}

// TestRouterEndsATermWithdrawnUnderItsToken: this pod leads term 5, and
// its routing has been taken away under token 5 (the slice emptied, its
// pod's label set "false", by another writer). The admission policy
// refuses to publish it again under token 5, so the router ends the term:
// a new term, with a larger token, can publish. A slice or pod that does
// not carry this term's token is published as before, with no term ended.
func TestRouterEndsATermWithdrawnUnderItsToken(t *testing.T) {
	emptied := sliceOf(me, podIP, 5)
	emptied.Endpoints = nil
	for _, tc := range []struct {
		name    string
		mode    Mode
		objs    []runtime.Object
		refuse  func(*fake.Clientset)
		wantEnd bool
	}{
		{name: "slice emptied under this term's token", mode: ModeEndpointSlice, objs: []runtime.Object{service(nil, intstr.FromInt32(8080)), emptied}, refuse: refuseSameTokenSlice, wantEnd: true},
		{name: "slice of an older term", mode: ModeEndpointSlice, objs: []runtime.Object{service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4)}, refuse: refuseSameTokenSlice},
		{name: "pod unlabelled under this term's token", mode: ModeLabel, objs: []runtime.Object{pod(me, "false", lease, 5)}, refuse: refuseSameTokenLeader, wantEnd: true},
		{name: "pod fenced by an older term", mode: ModeLabel, objs: []runtime.Object{pod(me, "false", lease, 4)}, refuse: refuseSameTokenLeader},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			const resync = 50 * time.Millisecond
			l := &endingLeadership{fakeLeadership: newLeadership(leading(5))}
			cs := fake.NewClientset(tc.objs...)
			tc.refuse(cs)
			r, err := New(Config{Mode: tc.mode, Namespace: ns, PodName: me, LeaseName: lease, Service: "app", PodIP: podIP, LeaderLabel: DefaultLeaderLabel, Client: cs, Leadership: l, Resync: resync, MaxBackoff: resync})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.Run(ctx)
			}()
			defer func() { cancel(); <-done }()
			// Several resyncs: enough for a refused write to be seen, and
			// for a published one to be the last word.
			settled := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 4*resync+endTermSlack, true, func(context.Context) (bool, error) {
				return len(l.endedTerms()) > 0 || (!tc.wantEnd && counterValue(t, r.Metrics().writes) > 0), nil
			})
			ended := l.endedTerms()
			switch {
			case tc.wantEnd && (settled != nil || len(ended) != 1 || ended[0] != 5):
				t.Errorf("terms ended: %v, want [5]: the Service would have no leader for the rest of the term", ended)
			case !tc.wantEnd && (settled != nil || len(ended) != 0):
				t.Errorf("terms ended: %v, writes %v; want none ended and the routing published", ended, counterValue(t, r.Metrics().writes))
			}
		})
	}
}
