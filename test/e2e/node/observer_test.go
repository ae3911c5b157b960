//go:build integration

package node_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// observer records, while a fault runs, what a user of the Service sees:
// the EndpointSlices' ready endpoints (watched), the pod that answers a
// request to the ClusterIP (every 25 ms, a new connection each time), and
// the Lease (watched).
type observer struct {
	d      *deployment
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	endpoints []endpointsAt // every change of the ready set
	answers   []answerAt
	leases    []leaseAt
	errs      []error
	// sliceToken is the highest fencing token seen on the Service's
	// EndpointSlices (written by the leader in --route=endpointslice).
	sliceToken int64
}

// fencingTokenAnnotation is where a leader in --route=endpointslice mode
// writes its term's fencing token on the EndpointSlice.
const fencingTokenAnnotation = "leader-elector.io/fencing-token"

type endpointsAt struct {
	at    time.Time
	ready []string
}

type answerAt struct {
	at  time.Time
	pod string // "" when the request failed
}

type leaseAt struct {
	at            time.Time
	holder        string
	transitions   int32
	acquire, renw time.Time
}

func (d *deployment) observe(t *testing.T) *observer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o := &observer{d: d, cancel: cancel}
	url, err := d.serviceURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Informers, not bare watches: they resume after the API server closes
	// a watch and list again when it cannot resume (410 after an etcd
	// restart), so the record has no silent hole when the soak restarts
	// the control plane.
	var slices cache.Store
	slices, slicesInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				opts.LabelSelector = discoveryv1.LabelServiceName + "=" + d.service
				return d.client.DiscoveryV1().EndpointSlices(d.namespace).List(ctx, opts)
			},
			WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				opts.LabelSelector = discoveryv1.LabelServiceName + "=" + d.service
				return d.client.DiscoveryV1().EndpointSlices(d.namespace).Watch(ctx, opts)
			},
		},
		ObjectType: &discoveryv1.EndpointSlice{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.sliceChanged(slices, obj) },
			UpdateFunc: func(_, obj any) { o.sliceChanged(slices, obj) },
			DeleteFunc: func(any) { o.sliceChanged(slices, nil) },
		},
	})
	_, leaseInformer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: d.leaseListWatch(),
		ObjectType:    &coordinationv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { o.leaseChanged(obj) },
			UpdateFunc: func(_, obj any) { o.leaseChanged(obj) },
		},
	})
	o.wg.Add(3)
	go func() { defer o.wg.Done(); slicesInformer.RunWithContext(ctx) }()
	go func() { defer o.wg.Done(); leaseInformer.RunWithContext(ctx) }()
	if !cache.WaitForCacheSync(ctx.Done(), slicesInformer.HasSynced, leaseInformer.HasSynced) {
		t.Fatal("the observer's informers did not sync")
	}
	o.mu.Lock()
	if len(o.endpoints) == 0 { // no slice yet
		o.endpoints = append(o.endpoints, endpointsAt{time.Now(), nil})
	}
	o.mu.Unlock()
	go o.poll(ctx, url)
	return o
}

// sliceChanged records the ready endpoints of every slice in the store
// when they changed, and checks the fencing token of the slice written.
// leaseListWatch lists and watches d's Lease alone (by name).
func (d *deployment) leaseListWatch() cache.ListerWatcher {
	byName := fields.OneTermEqualSelector("metadata.name", d.lease).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = byName
			return d.client.CoordinationV1().Leases(d.namespace).List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = byName
			return d.client.CoordinationV1().Leases(d.namespace).Watch(ctx, opts)
		},
	}
}

func (o *observer) sliceChanged(store cache.Store, obj any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		if tok, ok := s.Annotations[fencingTokenAnnotation]; ok {
			if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n < o.sliceToken {
				o.errs = append(o.errs, fmt.Errorf("EndpointSlice %s written with fencing token %q after token %d", s.Name, tok, o.sliceToken))
			} else {
				o.sliceToken = n
			}
		}
	}
	var all []discoveryv1.EndpointSlice
	for _, x := range store.List() {
		all = append(all, *x.(*discoveryv1.EndpointSlice))
	}
	ready := readyIn(all)
	slices.Sort(ready)
	if n := len(o.endpoints); n == 0 || !slices.Equal(o.endpoints[n-1].ready, ready) {
		o.endpoints = append(o.endpoints, endpointsAt{time.Now(), ready})
	}
}

func (o *observer) leaseChanged(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	o.mu.Lock()
	o.leases = append(o.leases, leaseRecord(time.Now(), l))
	o.mu.Unlock()
}

func leaseRecord(at time.Time, l *coordinationv1.Lease) leaseAt {
	r := leaseAt{at: at}
	if l.Spec.HolderIdentity != nil {
		r.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.LeaseTransitions != nil {
		r.transitions = *l.Spec.LeaseTransitions
	}
	if l.Spec.AcquireTime != nil {
		r.acquire = l.Spec.AcquireTime.Time
	}
	if l.Spec.RenewTime != nil {
		r.renw = l.Spec.RenewTime.Time
	}
	return r
}

func (o *observer) poll(ctx context.Context, url string) {
	defer o.wg.Done()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		reqCtx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		pod, err := ask(reqCtx, url)
		cancel()
		if err != nil {
			pod = ""
		}
		if ctx.Err() != nil {
			return
		}
		o.mu.Lock()
		o.answers = append(o.answers, answerAt{time.Now(), pod})
		o.mu.Unlock()
	}
}

// stop ends the observation and checks the routing invariant: never more
// than one ready endpoint, the answering pod changes at most maxSwitches
// times, and a fencing token on the EndpointSlices never goes back.
func (o *observer) stop(t *testing.T, maxSwitches int) observation {
	t.Helper()
	o.cancel()
	o.wg.Wait()
	for _, err := range o.errs {
		t.Errorf("observer: %v", err)
	}
	var r observation
	r.endpoints, r.answers, r.leases = o.endpoints, o.answers, o.leases
	for _, e := range r.endpoints {
		if len(e.ready) > 1 {
			t.Errorf("at %s the Service had %d ready endpoints: %v", e.at.Format("15:04:05.000"), len(e.ready), e.ready)
		}
	}
	if seq := r.answeringPods(); len(seq) > maxSwitches+1 {
		t.Errorf("the pods answering the Service changed %d times, want at most %d: %v", len(seq)-1, maxSwitches, seq)
	}
	return r
}

type observation struct {
	endpoints []endpointsAt
	answers   []answerAt
	leases    []leaseAt
}

// logEndpoints logs the Service's ready endpoints as they were from from
// to to.
func (r observation) logEndpoints(t *testing.T, from, to time.Time) {
	t.Helper()
	var lines []string
	for i, e := range r.endpoints {
		// From the state at from (the last change before it) on.
		supersededBeforeFrom := i+1 < len(r.endpoints) && !r.endpoints[i+1].at.After(from)
		if e.at.After(to) || supersededBeforeFrom {
			continue
		}
		lines = append(lines, fmt.Sprintf("%s %v", stamp(e.at), e.ready))
	}
	t.Logf("the Service's ready endpoints from %s to %s:\n%s", stamp(from), stamp(to), strings.Join(lines, "\n"))
}

// answeringPods is the sequence of pods that answered, repeats collapsed.
func (r observation) answeringPods() []string {
	var seq []string
	for _, a := range r.answers {
		if a.pod != "" && (len(seq) == 0 || seq[len(seq)-1] != a.pod) {
			seq = append(seq, a.pod)
		}
	}
	return seq
}

// endpointGap is the longest time the Service had no ready endpoint.
func (r observation) endpointGap() time.Duration {
	var longest time.Duration
	for _, g := range r.endpointGaps() {
		longest = max(longest, g)
	}
	return longest
}

// endpointGaps are the intervals in which the Service had no ready
// endpoint.
func (r observation) endpointGaps() []time.Duration {
	var gaps []time.Duration
	for _, g := range r.endpointGapSpans() {
		gaps = append(gaps, g.end.Sub(g.start))
	}
	return gaps
}

type span struct{ start, end time.Time }

func (r observation) endpointGapSpans() []span {
	var spans []span
	var since time.Time
	for _, e := range r.endpoints {
		switch {
		case len(e.ready) == 0 && since.IsZero():
			since = e.at
		case len(e.ready) > 0 && !since.IsZero():
			spans = append(spans, span{since, e.at})
			since = time.Time{}
		}
	}
	return spans
}

// handoverGap is the longest time the Service had no ready endpoint after
// the leader let go: a gap that opens while the Lease still names the old
// leader is counted from the first Lease record that no longer does. Such a
// gap opens when the old leader's pod is deleted: the EndpointSlice
// controller drops a terminating pod at once, but the sidecar learns of the
// deletion only when the kubelet stops the app (which hands leadership over
// on SIGTERM), and how long the kubelet takes to do that is not the
// sidecar's to shorten. Only a release counts (the Lease's next record
// names no holder): a gap that ends in a takeover at expiry, or in which
// the Lease never changes, counts whole.
func (r observation) handoverGap() time.Duration {
	var longest time.Duration
	for _, g := range r.endpointGapSpans() {
		from := g.start
		if released, ok := r.releasedAfter(g.start); ok && released.Before(g.end) {
			from = latest(from, released)
		}
		longest = max(longest, g.end.Sub(from))
	}
	return longest
}

// releasedAfter is when the Lease's holder at t (the holder of the last
// record at or before t) was seen to let it go: the first later record that
// names someone else, if it names no one.
func (r observation) releasedAfter(t time.Time) (time.Time, bool) {
	holder, known := "", false
	for _, l := range r.leases {
		if !l.at.After(t) {
			holder, known = l.holder, true
			continue
		}
		if known && l.holder != holder {
			return l.at, holder != "" && l.holder == ""
		}
	}
	return time.Time{}, false
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// answerGap is the longest time between two answered requests.
func (r observation) answerGap() time.Duration {
	var longest time.Duration
	var last time.Time
	for _, a := range r.answers {
		if a.pod == "" {
			continue
		}
		if !last.IsZero() {
			longest = max(longest, a.at.Sub(last))
		}
		last = a.at
	}
	return longest
}

// firstLeaseAfter returns the first Lease record, from start on, whose holder
// satisfies ok.
func (r observation) firstLeaseAfter(start time.Time, ok func(leaseAt) bool) (leaseAt, bool) {
	for _, l := range r.leases {
		if !l.at.Before(start) && ok(l) {
			return l, true
		}
	}
	return leaseAt{}, false
}

func (r observation) String() string {
	var b strings.Builder
	for _, e := range r.endpoints {
		fmt.Fprintf(&b, "  %s ready endpoints %v\n", e.at.Format("15:04:05.000"), e.ready)
	}
	for _, l := range r.leases {
		fmt.Fprintf(&b, "  %s lease holder %q transitions %d renewTime %s\n", l.at.Format("15:04:05.000"), l.holder, l.transitions, l.renw.Format("15:04:05.000"))
	}
	return b.String()
}

// TestHandoverGap checks the handover gap's arithmetic on timelines the
// node recorded: a rolling update where the kubelet stopped the old
// leader's app 0.98 s after the EndpointSlice controller dropped its pod
// (only the 146 ms after the release count), one where the release came
// first (the whole gap counts), and a takeover at expiry (the whole gap
// counts: no release shortens it).
func TestHandoverGap(t *testing.T) {
	at := func(s string) time.Time {
		ts, err := time.Parse("15:04:05.000", s)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	for _, c := range []struct {
		name      string
		endpoints []endpointsAt
		leases    []leaseAt
		want      time.Duration
	}{{
		name: "kubelet late",
		endpoints: []endpointsAt{
			{at("02:57:13.012"), []string{"old"}}, {at("02:57:13.947"), nil}, {at("02:57:15.071"), []string{"new"}},
		},
		leases: []leaseAt{
			{at: at("02:57:13.013"), holder: "old"}, {at: at("02:57:13.995"), holder: "old"},
			{at: at("02:57:14.925"), holder: ""}, {at: at("02:57:14.939"), holder: "new"},
		},
		want: 146 * time.Millisecond,
	}, {
		name: "released first",
		endpoints: []endpointsAt{
			{at("02:57:13.012"), []string{"old"}}, {at("02:57:14.950"), nil}, {at("02:57:15.071"), []string{"new"}},
		},
		leases: []leaseAt{
			{at: at("02:57:13.013"), holder: "old"}, {at: at("02:57:14.925"), holder: ""}, {at: at("02:57:14.939"), holder: "new"},
		},
		want: 121 * time.Millisecond,
	}, {
		name: "taken at expiry",
		endpoints: []endpointsAt{
			{at("02:57:13.012"), []string{"old"}}, {at("02:57:13.947"), nil}, {at("02:57:29.100"), []string{"new"}},
		},
		leases: []leaseAt{
			{at: at("02:57:13.013"), holder: "old"}, {at: at("02:57:29.000"), holder: "new"},
		},
		want: 15153 * time.Millisecond,
	}} {
		r := observation{endpoints: c.endpoints, leases: c.leases}
		if got := r.handoverGap(); got != c.want {
			t.Errorf("%s: handoverGap = %v, want %v", c.name, got, c.want)
		}
	}
}
