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
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
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
	slicesList, err := d.client.DiscoveryV1().EndpointSlices(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + d.service})
	if err != nil {
		t.Fatal(err)
	}
	leaseList, err := d.client.CoordinationV1().Leases(d.namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", d.lease).String()})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	o.endpoints = append(o.endpoints, endpointsAt{now, readyIn(slicesList.Items)})
	for i := range leaseList.Items {
		o.leases = append(o.leases, leaseRecord(now, &leaseList.Items[i]))
	}
	o.wg.Add(3)
	go o.watchSlices(ctx, slicesList)
	go o.watchLease(ctx, leaseList.ResourceVersion)
	go o.poll(ctx, url)
	return o
}

func (o *observer) watchSlices(ctx context.Context, list *discoveryv1.EndpointSliceList) {
	defer o.wg.Done()
	current := map[string]discoveryv1.EndpointSlice{}
	for _, s := range list.Items {
		current[s.Name] = s
	}
	w, err := retryWatch(ctx, list.ResourceVersion, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.LabelSelector = discoveryv1.LabelServiceName + "=" + o.d.service
		return o.d.client.DiscoveryV1().EndpointSlices(o.d.namespace).Watch(ctx, opts)
	})
	if err != nil {
		o.fail(err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			if ctx.Err() == nil {
				o.fail(fmt.Errorf("endpointslice watch: %v", ev.Object))
			}
			return
		}
		if tok, ok := s.Annotations[fencingTokenAnnotation]; ok {
			if n, err := strconv.ParseInt(tok, 10, 64); err != nil || n < o.sliceToken {
				o.fail(fmt.Errorf("EndpointSlice %s written with fencing token %q after token %d", s.Name, tok, o.sliceToken))
			} else {
				o.sliceToken = n
			}
		}
		if ev.Type == watch.Deleted {
			delete(current, s.Name)
		} else {
			current[s.Name] = *s
		}
		var all []discoveryv1.EndpointSlice
		for _, s := range current {
			all = append(all, s)
		}
		ready := readyIn(all)
		slices.Sort(ready)
		o.mu.Lock()
		if last := o.endpoints[len(o.endpoints)-1].ready; !slices.Equal(last, ready) {
			o.endpoints = append(o.endpoints, endpointsAt{time.Now(), ready})
		}
		o.mu.Unlock()
	}
}

func (o *observer) watchLease(ctx context.Context, rv string) {
	defer o.wg.Done()
	w, err := retryWatch(ctx, rv, func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", o.d.lease).String()
		return o.d.client.CoordinationV1().Leases(o.d.namespace).Watch(ctx, opts)
	})
	if err != nil {
		o.fail(err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		l, ok := ev.Object.(*coordinationv1.Lease)
		if !ok {
			if ctx.Err() == nil {
				o.fail(fmt.Errorf("lease watch: %v", ev.Object))
			}
			return
		}
		o.mu.Lock()
		o.leases = append(o.leases, leaseRecord(time.Now(), l))
		o.mu.Unlock()
	}
}

// retryWatch watches from rv and resumes after the API server closes the
// watch (a restart, a timeout): the soak kills the API server, and an
// observer that stopped watching would miss what followed without a word.
// A watch that cannot resume (its resourceVersion compacted away) ends
// with an error event, which the observer reports.
func retryWatch(ctx context.Context, rv string, watchFunc func(context.Context, metav1.ListOptions) (watch.Interface, error)) (watch.Interface, error) {
	return watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: watchFunc})
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

func (o *observer) fail(err error) {
	o.mu.Lock()
	o.errs = append(o.errs, err)
	o.mu.Unlock()
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
	var since time.Time
	for _, e := range r.endpoints {
		switch {
		case len(e.ready) == 0 && since.IsZero():
			since = e.at
		case len(e.ready) > 0 && !since.IsZero():
			longest = max(longest, e.at.Sub(since))
			since = time.Time{}
		}
	}
	return longest
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
