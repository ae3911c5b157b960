package routing

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// The fencing token a stolen ServiceAccount token may plant: the label
// policy's ^[0-9]{1,19}$ admits it, and it is above every token a Lease
// (int32) can carry.
const planted = "9000000000000000000"

// beforeRecovery is a token from before the documented recovery from int32
// exhaustion (docs/safety.md): in the Lease's range, but above every token
// of the Lease that replaced it.
const beforeRecovery = 2_147_483_000

// overwriteMessage is the line a foreign token is logged with.
const overwriteMessage = "Overwriting a fencing token that no term of the Lease wrote"

// leaseOf is the Lease as the API server has it, at term token.
func leaseOf(holder string, token int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{}
	l.Name, l.Namespace = lease, ns
	l.Spec.HolderIdentity = ptr.To(holder)
	l.Spec.LeaseTransitions = ptr.To(token)
	return l
}

// withToken is obj with its fencing token annotation set to v.
func withToken[T interface {
	GetAnnotations() map[string]string
	SetAnnotations(map[string]string)
}](obj T, v string) T {
	a := maps.Clone(obj.GetAnnotations())
	if a == nil {
		a = map[string]string{}
	}
	a[FencingTokenAnnotation] = v
	obj.SetAnnotations(a)
	return obj
}

// bufferedContext logs into the test and keeps the lines up to V(2), so
// that a test can count them.
func bufferedContext(t *testing.T) (context.Context, ktesting.Buffer) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true), ktesting.Verbosity(2)))
	return klog.NewContext(context.Background(), logger), logger.GetSink().(ktesting.Underlier).GetBuffer()
}

func linesSaying(b ktesting.Buffer, msg string) int {
	n := 0
	for _, e := range b.Data() {
		if e.Message == msg {
			n++
		}
	}
	return n
}

func leaseReads(cs *fake.Clientset) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "leases" {
			n++
		}
	}
	return n
}

// TestForeignSliceToken: a slice token that no term of the Lease wrote
// (the review's probe: 10.9.9.9 pinned with 9000000000000000000) is
// overwritten by the next leader, counted by reason and logged; before,
// every later leader refused to overwrite "a newer term" and the Service
// stayed routed to the planted address.
func TestForeignSliceToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		token  string
		reason string
		// leaseReads is how many times the leader had to read the Lease
		// to judge the token: not for one outside the Lease's range.
		leaseReads int
	}{
		{name: "9e18, the review's probe: out of the Lease's int32 range", token: planted, reason: reasonMalformed},
		{name: "2^31, just out of the range", token: "2147483648", reason: reasonMalformed},
		{name: "not a number", token: "x7", reason: reasonMalformed},
		{name: "negative", token: "-1", reason: reasonMalformed},
		{name: "in range but above the Lease: written before a recovery from int32 exhaustion", token: formatToken(beforeRecovery), reason: reasonAboveLease, leaseReads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := bufferedContext(t)
			// After the recovery the Lease starts again from low tokens,
			// and so does a restarted process's highest token seen.
			const term = 29_000_001
			attacker := withToken(sliceOf("attacker", "10.9.9.9", 1), tc.token)
			w, cs := newSliceWriter(t, newLeadership(leading(term)), service(nil, intstr.FromInt32(8080)), attacker, leaseOf(me, term))
			if err := w.publish(ctx, leading(term)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			got := getSlice(t, cs)
			if got.Endpoints[0].Addresses[0] != podIP || got.Annotations[FencingTokenAnnotation] != formatToken(term) || got.Annotations[HolderAnnotation] != me {
				t.Errorf("slice routes to %v with token %s by %s; want %s, %d, %s", got.Endpoints[0].Addresses, got.Annotations[FencingTokenAnnotation], got.Annotations[HolderAnnotation], podIP, term, me)
			}
			if n := overriddenValue(t, w.metrics, tc.reason); n != 1 {
				t.Errorf("overridden{%s} = %v, want 1", tc.reason, n)
			}
			if n := counterValue(t, w.metrics.refused); n != 0 {
				t.Errorf("fenced = %v, want 0: nothing was refused", n)
			}
			if n := linesSaying(logs, overwriteMessage); n != 1 {
				t.Errorf("%d lines %q, want 1", n, overwriteMessage)
			}
			if n := leaseReads(cs); n != tc.leaseReads {
				t.Errorf("%d reads of the Lease, want %d", n, tc.leaseReads)
			}
		})
	}
}

// TestForeignTokenLoggedOnce: while a foreign token stays on the slice (the
// overwrite fails and is retried), every meeting is counted, but the line
// is logged once per object and value; a new value is logged again.
func TestForeignTokenLoggedOnce(t *testing.T) {
	ctx, logs := bufferedContext(t)
	attacker := withToken(sliceOf("attacker", "10.9.9.9", 1), planted)
	w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), attacker, leaseOf(me, 5))
	failures := 3
	cs.PrependReactor("update", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, apierrors.NewInternalError(errors.New("etcd is slow"))
		}
		return false, nil, nil
	})
	for i := range 3 {
		if err := w.publish(ctx, leading(5)); err == nil || errors.Is(err, errStale) {
			t.Fatalf("publish %d: %v, want the update's error", i, err)
		}
	}
	if err := w.publish(ctx, leading(5)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "5" {
		t.Fatalf("slice token %s, want 5", got.Annotations[FencingTokenAnnotation])
	}
	if n := overriddenValue(t, w.metrics, reasonMalformed); n != 4 {
		t.Errorf("overridden{malformed} = %v, want 4 (one per meeting)", n)
	}
	if n := linesSaying(logs, overwriteMessage); n != 1 {
		t.Errorf("%d lines %q over four meetings, want 1", n, overwriteMessage)
	}
	// Planted again with another value: a new line.
	gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	again := withToken(getSlice(t, cs), "8000000000000000000")
	if err := cs.Tracker().Update(gvr, again, ns); err != nil {
		t.Fatal(err)
	}
	if err := w.publish(ctx, leading(5)); err != nil {
		t.Fatalf("publish: %v", err)
	}
	if n := linesSaying(logs, overwriteMessage); n != 2 {
		t.Errorf("%d lines %q after a second planting, want 2", n, overwriteMessage)
	}
}

// TestNewerTokenStillRefused: a token above this term's that a term of the
// Lease can have written is refused as before, whether this process has
// seen it already or only the Lease carries it (this pod's view is behind).
func TestNewerTokenStillRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// now is this pod's view when it judges the token.
		now        leadership.State
		onLease    int32
		leaseReads int
	}{
		{name: "seen by this process on the Lease", now: following("pod-b", 6), onLease: 6},
		{name: "on the Lease, not yet seen by this process", now: leading(5), onLease: 6, leaseReads: 1},
	} {
		t.Run("slice: "+tc.name, func(t *testing.T) {
			ctx, logs := bufferedContext(t)
			newer := sliceOf("pod-b", "10.0.0.8", 6)
			w, cs := newSliceWriter(t, newLeadership(tc.now), service(nil, intstr.FromInt32(8080)), newer, leaseOf("pod-b", tc.onLease))
			if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
				t.Fatalf("publish: %v, want errStale", err)
			}
			if got := getSlice(t, cs); got.Annotations[FencingTokenAnnotation] != "6" || got.Endpoints[0].Addresses[0] != "10.0.0.8" {
				t.Errorf("the newer term's slice was changed: %+v", got)
			}
			if n := counterValue(t, w.metrics.refused.WithLabelValues(reasonNewerToken)); n != 1 {
				t.Errorf("fenced{newer_token} = %v, want 1", n)
			}
			if n := overriddenValue(t, w.metrics, ""); n != 0 || linesSaying(logs, overwriteMessage) != 0 {
				t.Errorf("a legitimate term's token was reported foreign (%v)", n)
			}
			if n := leaseReads(cs); n != tc.leaseReads {
				t.Errorf("%d reads of the Lease, want %d", n, tc.leaseReads)
			}
		})
		t.Run("label: "+tc.name, func(t *testing.T) {
			ctx, _ := bufferedContext(t)
			w, cs := newLabelWriter(t, newLeadership(tc.now), pod(me, "false", lease, 0), pod("pod-b", "true", lease, 6), leaseOf("pod-b", tc.onLease))
			if err := w.publish(ctx, leading(5)); !errors.Is(err, errStale) {
				t.Fatalf("publish: %v, want errStale", err)
			}
			if got, token := leaderLabel(t, cs, "pod-b"); got != "true" || token != "6" {
				t.Errorf("the newer leader: label %q token %q, want true and 6", got, token)
			}
			if n := overriddenValue(t, w.metrics, ""); n != 0 {
				t.Errorf("a legitimate term's token was reported foreign (%v)", n)
			}
		})
	}
}

// TestForeignPodToken: label mode, the same on a pod's annotation: a pod
// carrying a token no term wrote is labelled or unlabelled as if it carried
// none.
func TestForeignPodToken(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pods   []runtime.Object
		reason string
	}{
		{name: "this pod carries 9e18", reason: reasonMalformed, pods: []runtime.Object{
			withToken(pod(me, "false", lease, 0), planted),
		}},
		{name: "another pod carries 9e18 and the label", reason: reasonMalformed, pods: []runtime.Object{
			pod(me, "false", lease, 0), withToken(pod("pod-b", "true", lease, 0), planted),
		}},
		{name: "another pod carries a token from before a recovery from int32 exhaustion", reason: reasonAboveLease, pods: []runtime.Object{
			pod(me, "false", lease, 0), pod("pod-b", "true", lease, beforeRecovery),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, logs := bufferedContext(t)
			w, cs := newLabelWriter(t, newLeadership(leading(5)), append(tc.pods, leaseOf(me, 5))...)
			if err := w.publish(ctx, leading(5)); err != nil {
				t.Fatalf("publish: %v", err)
			}
			for _, o := range tc.pods {
				name := o.(interface{ GetName() string }).GetName()
				want := "false"
				if name == me {
					want = "true"
				}
				if got, token := leaderLabel(t, cs, name); got != want || token != "5" {
					t.Errorf("%s: label %q token %q, want %s and 5", name, got, token, want)
				}
			}
			if n := overriddenValue(t, w.metrics, tc.reason); n != 1 {
				t.Errorf("overridden{%s} = %v, want 1", tc.reason, n)
			}
			if n := linesSaying(logs, overwriteMessage); n != 1 {
				t.Errorf("%d lines %q, want 1", n, overwriteMessage)
			}
		})
	}
}

// TestRouterUndoesAForeignTokenAtResync: a slice the leader had published,
// then overwritten with a foreign token and another address, routes to the
// leader again by its next resync.
func TestRouterUndoesAForeignTokenAtResync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const resync = 50 * time.Millisecond
	l := newLeadership(leading(5))
	cs := fake.NewClientset(service(nil, intstr.FromInt32(8080)), sliceOf("pod-b", "10.0.0.8", 4), leaseOf(me, 5))
	allowOnly(t, cs, sliceCalls...)
	r, err := New(Config{Mode: ModeEndpointSlice, Namespace: ns, PodName: me, LeaseName: lease, Service: "app", PodIP: podIP, Client: cs, Leadership: l, Resync: resync, MaxBackoff: resync})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	defer func() { cancel(); <-done }()
	routesHere := func(what string, within time.Duration) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, within, true, func(context.Context) (bool, error) {
			s := getSlice(t, cs)
			return s.Annotations[FencingTokenAnnotation] == "5" && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == podIP, nil
		})
		if err != nil {
			t.Fatalf("%s: slice %+v", what, getSlice(t, cs))
		}
	}
	routesHere("published", 10*time.Second)
	gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	hijacked := withToken(sliceOf("attacker", "10.9.9.9", 1), planted)
	hijacked.ResourceVersion = getSlice(t, cs).ResourceVersion
	if err := cs.Tracker().Update(gvr, hijacked, ns); err != nil {
		t.Fatal(err)
	}
	// One resync, and the slack of a loaded test machine's scheduling.
	routesHere("repaired at the next resync", resync+5*time.Second)
	if n := overriddenValue(t, r.Metrics(), reasonMalformed); n != 1 {
		t.Errorf("overridden{malformed} = %v, want 1", n)
	}
}

// overriddenValue is the overridden counter of reason, or of every reason
// for "".
func overriddenValue(t *testing.T, m *Metrics, reason string) float64 {
	t.Helper()
	if reason == "" {
		return counterValue(t, m.overridden)
	}
	return counterValue(t, m.overridden.WithLabelValues(reason))
}

// TestInt32RecoveryOverwritesTheOldToken: the recovery from int32
// exhaustion (docs/safety.md) stops every sidecar and deletes the Lease, so
// the tokens start again from 1; the routing objects still carry the
// exhausted token, 2147483647, a possible Lease token. A restarted
// process's highest token seen is the new Lease's, so the first leader
// overwrites the old token, as written by no term of this Lease.
func TestInt32RecoveryOverwritesTheOldToken(t *testing.T) {
	const exhausted, restarted = 2_147_483_647, 1
	t.Run("slice", func(t *testing.T) {
		ctx, _ := bufferedContext(t)
		old := sliceOf("pod-b", "10.0.0.8", exhausted)
		w, cs := newSliceWriter(t, newLeadership(leading(restarted)), service(nil, intstr.FromInt32(8080)), old, leaseOf(me, restarted))
		if err := w.publish(ctx, leading(restarted)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		if got := getSlice(t, cs); got.Endpoints[0].Addresses[0] != podIP || got.Annotations[FencingTokenAnnotation] != "1" {
			t.Errorf("slice routes to %v with token %s; want %s, 1", got.Endpoints[0].Addresses, got.Annotations[FencingTokenAnnotation], podIP)
		}
		if n := overriddenValue(t, w.metrics, reasonAboveLease); n != 1 {
			t.Errorf("overridden{above_lease} = %v, want 1", n)
		}
	})
	t.Run("label", func(t *testing.T) {
		ctx, _ := bufferedContext(t)
		w, cs := newLabelWriter(t, newLeadership(leading(restarted)), pod(me, "false", lease, exhausted), pod("pod-b", "true", lease, exhausted), leaseOf(me, restarted))
		if err := w.publish(ctx, leading(restarted)); err != nil {
			t.Fatalf("publish: %v", err)
		}
		for name, want := range map[string]string{me: "true", "pod-b": "false"} {
			if got, token := leaderLabel(t, cs, name); got != want || token != "1" {
				t.Errorf("%s: label %q token %q, want %s and 1", name, got, token, want)
			}
		}
		if n := overriddenValue(t, w.metrics, reasonAboveLease); n != 2 {
			t.Errorf("overridden{above_lease} = %v, want 2 (one per pod)", n)
		}
	})
}
