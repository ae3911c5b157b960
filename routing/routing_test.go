package routing

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/leadership"
)

const (
	ns    = "ns"
	me    = "pod-a"
	lease = "my-app"
	podIP = "10.0.0.7"
)

// fakeLeadership is an election state the test sets.
type fakeLeadership struct {
	mu      sync.Mutex
	state   leadership.State
	changed chan struct{}
}

func newLeadership(s leadership.State) *fakeLeadership {
	return &fakeLeadership{state: s, changed: make(chan struct{})}
}

func (f *fakeLeadership) Watch() (leadership.State, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.changed
}

func (f *fakeLeadership) Snapshot() leadership.State {
	s, _ := f.Watch()
	return s
}

func (f *fakeLeadership) set(s leadership.State) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
	close(f.changed)
	f.changed = make(chan struct{})
}

// leading is this pod's state while it leads term token.
func leading(token int64) leadership.State {
	deadline := time.Now().Add(time.Minute)
	return leadership.State{Identity: me, Holder: me, IsLeader: true, FencingToken: token, ValidUntil: deadline.Round(0), Deadline: deadline}
}

// following is this pod's state while holder leads term token.
func following(holder string, token int64) leadership.State {
	return leadership.State{Identity: me, Holder: holder, FencingToken: token}
}

// allowOnly fails the test on any request outside the verbs the mode's RBAC
// grants: what the code calls is what the Role must allow.
func allowOnly(t *testing.T, cs *fake.Clientset, allowed ...string) {
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		call := a.GetVerb() + " " + a.GetResource().Resource
		if !slices.Contains(allowed, call) {
			t.Errorf("unexpected request: %s", call)
			return true, nil, fmt.Errorf("unexpected request %s", call)
		}
		return false, nil, nil
	})
}

// No create: the slice is shipped with the manifests (ErrSliceMissing).
// "get leases": a slice token above every one this process has seen is
// judged by the Lease's own (fence).
var sliceCalls = []string{"get services", "get endpointslices", "update endpointslices", "get leases"}

func service(selector map[string]string, target intstr.IntOrString) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns, UID: "svc-uid"},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{
			{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: target},
		}},
	}
}

func sliceOf(holder, ip string, token int64) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: SliceName("app"), Namespace: ns, ResourceVersion: "1", Annotations: map[string]string{
			FencingTokenAnnotation: formatToken(token), HolderAnnotation: holder,
		}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}}},
	}
}

func newSliceWriter(t *testing.T, l Leadership, objs ...runtime.Object) (*sliceWriter, *fake.Clientset) {
	cs := fake.NewClientset(objs...)
	allowOnly(t, cs, sliceCalls...)
	m := newMetrics(ModeEndpointSlice)
	cfg := Config{Mode: ModeEndpointSlice, Namespace: ns, PodName: me, LeaseName: lease, Service: "app", PodIP: podIP, Client: cs, Leadership: l}
	return &sliceWriter{cfg: cfg, fence: newFence(l, m, leaseToken(cfg)), metrics: m}, cs
}

func getSlice(t *testing.T, cs *fake.Clientset) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := cs.Tracker().Get(discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), ns, SliceName("app"))
	if err != nil {
		t.Fatal(err)
	}
	return s.(*discoveryv1.EndpointSlice)
}

func TestSlicePublish(t *testing.T) {
	for _, tc := range []struct {
		name     string
		existing *discoveryv1.EndpointSlice
	}{
		{name: "the shipped slice, never written: filled", existing: shippedSlice()},
		{name: "an older term's slice: replaced in one write", existing: sliceOf("pod-b", "10.0.0.8", 4)},
		{name: "this term's slice, emptied: filled", existing: func() *discoveryv1.EndpointSlice { s := sliceOf(me, podIP, 5); s.Endpoints = nil; return s }()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			objs := []runtime.Object{service(nil, intstr.FromInt32(8080))}
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			w, cs := newSliceWriter(t, newLeadership(leading(5)), objs...)
			if err := w.publish(ctx, leading(5)); err != nil {
				t.Fatal(err)
			}
			got := getSlice(t, cs)
			if len(got.Endpoints) != 1 || !slices.Equal(got.Endpoints[0].Addresses, []string{podIP}) || !*got.Endpoints[0].Conditions.Ready {
				t.Errorf("endpoints %+v, want only %s, ready", got.Endpoints, podIP)
			}
			if got.Annotations[FencingTokenAnnotation] != "5" || got.Annotations[HolderAnnotation] != me {
				t.Errorf("annotations %v, want token 5 by %s", got.Annotations, me)
			}
			if got.Labels[discoveryv1.LabelServiceName] != "app" || got.Labels[discoveryv1.LabelManagedBy] != ManagedBy {
				t.Errorf("labels %v", got.Labels)
			}
			if len(got.Ports) != 1 || *got.Ports[0].Port != 8080 || *got.Ports[0].Name != "http" {
				t.Errorf("ports %+v, want http → 8080", got.Ports)
			}
			if n := counterValue(t, w.metrics.writes); n != 1 {
				t.Errorf("%v writes, want 1", n)
			}
			// Published already: nothing more to write.
			if err := w.publish(ctx, leading(5)); err != nil {
				t.Fatal(err)
			}
			if n := counterValue(t, w.metrics.writes); n != 1 {
				t.Errorf("%v writes after publishing the same again, want 1", n)
			}
		})
	}
}

// TestSliceFencing: a writer never overwrites a newer term's slice, never
// writes once its claim has lapsed, and re-reads after a conflict.
func TestSliceFencing(t *testing.T) {
	t.Run("a newer term's token in the slice: refused", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		newer := sliceOf("pod-b", "10.0.0.8", 6)
		w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), newer, leaseOf("pod-b", 6))
		err := w.publish(ctx, leading(5))
		if !errors.Is(err, errStale) {
			t.Fatalf("publish: %v, want errStale", err)
		}
		if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "6" || got.Endpoints[0].Addresses[0] != "10.0.0.8" {
			t.Errorf("the newer slice was changed: %+v", got)
		}
		if n := counterValue(t, w.metrics.refused.WithLabelValues(reasonNewerToken)); n != 1 {
			t.Errorf("fenced{newer_token} = %v, want 1", n)
		}
	})
	t.Run("the claim lapsed before the write: refused", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		for name, now := range map[string]leadership.State{
			"no longer leader":      following("pod-b", 6),
			"a new term of its own": leading(7),
			"validUntil passed":     {Identity: me, Holder: me, IsLeader: true, FencingToken: 5, ValidUntil: time.Now().Add(-time.Millisecond)},
		} {
			w, cs := newSliceWriter(t, newLeadership(now), service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4))
			if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
				t.Errorf("%s: publish %v, want errStale", name, err)
			}
			if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "4" {
				t.Errorf("%s: the slice was written: %+v", name, got)
			}
			if n := counterValue(t, w.metrics.refused.WithLabelValues(reasonLapsed)); n != 1 {
				t.Errorf("%s: fenced{lapsed} = %v, want 1", name, n)
			}
		}
	})
	t.Run("conflict: read again, and refused if a newer term wrote meanwhile", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4), leaseOf("pod-c", 6))
		// Another leader's write lands between our read and our update.
		cs.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
			newer := sliceOf("pod-c", "10.0.0.9", 6)
			newer.ResourceVersion = "2"
			if err := cs.Tracker().Update(gvr, newer, ns); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "discovery.k8s.io", Resource: "endpointslices"}, newer.Name, errors.New("changed"))
		})
		if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
			t.Fatalf("publish: %v, want errStale after the re-read", err)
		}
		if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "6" {
			t.Errorf("slice %+v, want the newer term's", got)
		}
		if c := counterValue(t, w.metrics.conflicts); c != 1 {
			t.Errorf("conflicts = %v, want 1", c)
		}
	})
	t.Run("conflict: read again and write", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4))
		conflicts := 0
		cs.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
			if conflicts == 0 {
				conflicts++
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "endpointslices"}, "x", errors.New("changed"))
			}
			return false, nil, nil
		})
		if err := w.publish(ctx, leading(5)); err != nil {
			t.Fatal(err)
		}
		if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "5" {
			t.Errorf("slice %+v, want term 5", got)
		}
		updates := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "update" {
				updates++
			}
		}
		if updates != 2 {
			t.Errorf("%d updates, want 2 (one refused, one after reading again)", updates)
		}
	})
	t.Run("the update carries the resourceVersion read", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4))
		if err := w.publish(ctx, leading(5)); err != nil {
			t.Fatal(err)
		}
		for _, a := range cs.Actions() {
			if u, ok := a.(k8stesting.UpdateAction); ok {
				if rv := u.GetObject().(*discoveryv1.EndpointSlice).ResourceVersion; rv != "1" {
					t.Errorf("update with resourceVersion %q, want %q", rv, "1")
				}
			}
		}
	})
}

func TestSliceServiceProblems(t *testing.T) {
	for name, svc := range map[string]*corev1.Service{
		"a Service with a selector": service(map[string]string{"app": "x"}, intstr.FromInt32(8080)),
		"a named target port":       service(nil, intstr.FromString("http")),
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			w, _ := newSliceWriter(t, newLeadership(leading(5)), svc)
			err := w.publish(ctx, leading(5))
			if err == nil || errors.Is(err, errStale) {
				t.Errorf("publish: %v, want an error", err)
			}
		})
	}
	t.Run("no target port: the port", func(t *testing.T) {
		ports, err := slicePorts(service(nil, intstr.IntOrString{}))
		if err != nil || *ports[0].Port != 80 {
			t.Errorf("slicePorts: %+v, %v", ports, err)
		}
	})
}

func TestSliceWithdraw(t *testing.T) {
	for _, tc := range []struct {
		name        string
		existing    *discoveryv1.EndpointSlice
		wantEmptied bool
	}{
		{name: "this pod's slice: emptied, token kept", existing: sliceOf(me, podIP, 5), wantEmptied: true},
		{name: "another pod's slice: left alone", existing: sliceOf("pod-b", "10.0.0.8", 6)},
		{name: "no slice: nothing to do"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			w, cs := newSliceWriter(t, newLeadership(following("pod-b", 6)), objs...)
			if err := w.withdraw(ctx); err != nil {
				t.Fatal(err)
			}
			if tc.existing == nil {
				return
			}
			got := getSlice(t, cs)
			if emptied := len(got.Endpoints) == 0; emptied != tc.wantEmptied {
				t.Errorf("emptied: %v, want %v", emptied, tc.wantEmptied)
			}
			if got.Annotations[FencingTokenAnnotation] != tc.existing.Annotations[FencingTokenAnnotation] {
				t.Errorf("token changed to %s", got.Annotations[FencingTokenAnnotation])
			}
		})
	}
}

var labelCalls = []string{"get pods", "list pods", "patch pods", "get leases"}

func pod(name, leader, group string, token int64) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "1", Labels: map[string]string{}, Annotations: map[string]string{}}}
	if leader != "" {
		p.Labels[DefaultLeaderLabel] = leader
	}
	if group != "" {
		p.Labels[GroupLabel] = group
	}
	if token > 0 {
		p.Annotations[FencingTokenAnnotation] = formatToken(token)
	}
	return p
}

func newLabelWriter(t *testing.T, l Leadership, objs ...runtime.Object) (*labelWriter, *fake.Clientset) {
	cs := fake.NewClientset(objs...)
	allowOnly(t, cs, labelCalls...)
	m := newMetrics(ModeLabel)
	cfg := Config{Mode: ModeLabel, Namespace: ns, PodName: me, LeaseName: lease, LeaderLabel: DefaultLeaderLabel, Client: cs, Leadership: l}
	return &labelWriter{cfg: cfg, fence: newFence(l, m, leaseToken(cfg)), metrics: m}, cs
}

func leaderLabel(t *testing.T, cs *fake.Clientset, name string) (string, string) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Labels[DefaultLeaderLabel], p.Annotations[FencingTokenAnnotation]
}

func TestLabelPublish(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, cs := newLabelWriter(t, newLeadership(leading(5)),
		pod(me, "", "", 0),
		pod("pod-b", "true", lease, 4),     // the old leader, cut off
		pod("other-x", "true", "other", 9), // another Lease's leader
		pod("pod-c", "false", lease, 0))
	if err := w.publish(ctx, leading(5)); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{me: "true", "pod-b": "false", "other-x": "true", "pod-c": "false"} {
		if got, _ := leaderLabel(t, cs, name); got != want {
			t.Errorf("%s: leader label %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{me, "pod-b", "pod-c"} {
		if _, token := leaderLabel(t, cs, name); token != "5" {
			t.Errorf("%s: fencing token %q, want 5: the new leader fences every pod of its Lease", name, token)
		}
	}
	if _, token := leaderLabel(t, cs, "other-x"); token != "9" {
		t.Errorf("another Lease's pod got fencing token %q", token)
	}
	// The others are fenced (and the old leader cleared) before this pod
	// joins its group and is labelled, so a Service never selects two pods;
	// every patch is conditional on the version read.
	var patched []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patched = append(patched, p.GetName())
			if !containsRV(p.GetPatch()) {
				t.Errorf("patch of %s without a resourceVersion: %s", p.GetName(), p.GetPatch())
			}
		}
	}
	if want := []string{"pod-b", "pod-c", me, me}; !slices.Equal(patched, want) {
		t.Errorf("patched %v, want %v in that order", patched, want)
	}
	// Published: the next check writes nothing.
	before := len(cs.Actions())
	if err := w.publish(ctx, leading(5)); err != nil {
		t.Fatal(err)
	}
	for _, a := range cs.Actions()[before:] {
		if a.GetVerb() == "patch" {
			t.Errorf("publishing again patched %s", a.(k8stesting.PatchAction).GetName())
		}
	}
}

func containsRV(patch []byte) bool {
	return strings.Contains(string(patch), `"resourceVersion":"1"`)
}

// counterValue reads a counter through a registry of its own.
func counterValue(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

func TestLabelFencing(t *testing.T) {
	t.Run("another pod labelled by a newer term: refused, nothing written", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newLabelWriter(t, newLeadership(leading(5)), pod(me, "false", lease, 0), pod("pod-b", "true", lease, 6), leaseOf("pod-b", 6))
		if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
			t.Fatalf("publish: %v, want errStale", err)
		}
		if got, _ := leaderLabel(t, cs, "pod-b"); got != "true" {
			t.Errorf("the newer leader's label was changed to %q", got)
		}
		if got, _ := leaderLabel(t, cs, me); got != "false" {
			t.Errorf("this pod's label %q, want false", got)
		}
	})
	t.Run("the claim lapsed: refused, nothing written", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newLabelWriter(t, newLeadership(following("pod-b", 6)), pod(me, "false", lease, 0), pod("pod-b", "true", lease, 4))
		if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
			t.Fatalf("publish: %v, want errStale", err)
		}
		if got, _ := leaderLabel(t, cs, "pod-b"); got != "true" {
			t.Errorf("pod-b's label was changed to %q", got)
		}
	})
	t.Run("conflict on this pod: read again", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		w, cs := newLabelWriter(t, newLeadership(leading(5)), pod(me, "false", lease, 0))
		refused := false
		cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if !refused {
				refused = true
				return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, me, errors.New("changed"))
			}
			return false, nil, nil
		})
		if err := w.publish(ctx, leading(5)); err != nil {
			t.Fatal(err)
		}
		if got, _ := leaderLabel(t, cs, me); got != "true" {
			t.Errorf("label %q, want true", got)
		}
		if c := counterValue(t, w.metrics.conflicts); c != 1 {
			t.Errorf("conflicts = %v, want 1", c)
		}
	})
}

func TestLabelWithdraw(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, cs := newLabelWriter(t, newLeadership(following("pod-b", 6)), pod(me, "true", lease, 5), pod("pod-b", "true", lease, 6))
	if err := w.withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := leaderLabel(t, cs, me); got != "false" {
		t.Errorf("label %q, want false", got)
	}
	if got, _ := leaderLabel(t, cs, "pod-b"); got != "true" {
		t.Errorf("a follower changed the leader's label to %q", got)
	}
	writes := counterValue(t, w.metrics.writes)
	if err := w.withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if counterValue(t, w.metrics.writes) != writes {
		t.Errorf("withdrawing again wrote again")
	}
}

// TestRouterFollowsTheElection: the router publishes on becoming leader,
// withdraws on losing it, and withdraws on shutdown.
func TestRouterFollowsTheElection(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	l := newLeadership(following("pod-b", 4))
	cs := fake.NewClientset(service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4))
	allowOnly(t, cs, sliceCalls...)
	r, err := New(Config{Mode: ModeEndpointSlice, Namespace: ns, PodName: me, LeaseName: lease, Service: "app", PodIP: podIP, Client: cs, Leadership: l, Resync: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	waitFor := func(what string, ok func(*discoveryv1.EndpointSlice) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return ok(getSlice(t, cs)), nil
		})
		if err != nil {
			t.Fatalf("%s: slice %+v", what, getSlice(t, cs))
		}
	}
	l.set(leading(5))
	waitFor("published on becoming leader", func(s *discoveryv1.EndpointSlice) bool {
		return s.Annotations[FencingTokenAnnotation] == "5" && len(s.Endpoints) == 1
	})
	l.set(leadership.State{Identity: me, FencingToken: 5})
	waitFor("withdrawn on losing leadership", func(s *discoveryv1.EndpointSlice) bool { return len(s.Endpoints) == 0 })
	l.set(leading(7))
	waitFor("published again for a new term", func(s *discoveryv1.EndpointSlice) bool {
		return s.Annotations[FencingTokenAnnotation] == "7" && len(s.Endpoints) == 1
	})
	cancel()
	<-done
	if s := getSlice(t, cs); len(s.Endpoints) != 0 {
		t.Errorf("after shutdown the slice still lists %+v", s.Endpoints)
	}
}

func TestNewNone(t *testing.T) {
	r, err := New(Config{Mode: ModeNone})
	if r != nil || err != nil {
		t.Errorf("New(none) = %v, %v; want nil, nil", r, err)
	}
}
