package partition

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leasecache"
)

// LeaseGroup is one watch over the Leases of a group, which share a label:
// it feeds the electors that registered a Lease of the group (it is their
// election.LeaseFeed), so that N partition Leases cost one watch and no
// reads, and it observes every other Lease of the group (the other pods'
// membership Leases) with the same time-bounded view of their holders as
// an elector has of its own Lease (election.Observer).
type LeaseGroup struct {
	namespace string
	selector  labels.Selector
	watches   kubernetes.Interface
	clock     clock.WithDelayedExecution
	onChange  func()

	mu        sync.Mutex
	running   bool
	fed       map[string]election.LeaseSink
	observers map[string]*election.Observer
	// labels are the observed Leases' labels, from their newest version.
	labels map[string]map[string]string
}

// NewLeaseGroup returns a group for the Leases in namespace that carry all
// of selector's labels. watches must have no request timeout (see
// election.NewClientsets). onChange, if set, is called (without blocking) when the
// holder of an observed Lease changes, expires, or a Lease comes or goes.
// clk nil means the real clock.
func NewLeaseGroup(namespace string, selector map[string]string, watches kubernetes.Interface, clk clock.WithDelayedExecution, onChange func()) *LeaseGroup {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &LeaseGroup{
		namespace: namespace,
		selector:  labels.SelectorFromSet(selector),
		watches:   watches,
		clock:     clk,
		onChange:  onChange,
		fed:       map[string]election.LeaseSink{},
		observers: map[string]*election.Observer{},
		labels:    map[string]map[string]string{},
	}
}

// Feed registers an elector's Lease (election.LeaseFeed); it must happen
// before Run.
func (g *LeaseGroup) Feed(namespace, name string, sink election.LeaseSink) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		return fmt.Errorf("lease group %s: elector for %s registered after the watch started", g.selector, name)
	}
	if namespace != g.namespace {
		return fmt.Errorf("lease group in namespace %s cannot feed lease %s/%s", g.namespace, namespace, name)
	}
	g.fed[name] = sink
	return nil
}

// Run watches the group until ctx ends.
func (g *LeaseGroup) Run(ctx context.Context) {
	g.mu.Lock()
	g.running = true
	g.mu.Unlock()
	defer g.stopObservers()

	bySelector := func(opts *metav1.ListOptions) { opts.LabelSelector = g.selector.String() }
	leasecache.WatchLeases(ctx, g.watches, g.namespace, bySelector, "lease-group-watch", cache.ResourceEventHandlerFuncs{
		AddFunc:    g.observe,
		UpdateFunc: func(_, obj any) { g.observe(obj) },
		DeleteFunc: g.observeDeleted,
	}, g.markSynced)
}

// markSynced tells every fed elector that the watch has delivered the
// group's state.
func (g *LeaseGroup) markSynced() {
	g.mu.Lock()
	fed := make([]election.LeaseSink, 0, len(g.fed))
	for _, c := range g.fed {
		fed = append(fed, c)
	}
	g.mu.Unlock()
	for _, c := range fed {
		c.Synced()
	}
}

func (g *LeaseGroup) observe(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	g.mu.Lock()
	c, isFed := g.fed[lease.Name]
	var o *election.Observer
	relabelled := false
	if !isFed {
		o = g.observers[lease.Name]
		if o == nil {
			o = election.NewObserver(g.clock, g.namespace, lease.Name, g.onChange)
			g.observers[lease.Name] = o
		}
		relabelled = !maps.Equal(g.labels[lease.Name], lease.Labels)
		g.labels[lease.Name] = lease.Labels
	}
	g.mu.Unlock()
	if isFed {
		c.Observe(lease)
		return
	}
	o.Observe(lease)
	if relabelled && g.onChange != nil {
		// A member's labels are part of the view (its N, its app's
		// health); the observer tells of holder changes only.
		g.onChange()
	}
}

func (g *LeaseGroup) observeDeleted(obj any) {
	name := ""
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		if l, ok := o.Obj.(*coordinationv1.Lease); ok {
			name = l.Name
		}
	}
	g.mu.Lock()
	c, isFed := g.fed[name]
	o := g.observers[name]
	delete(g.observers, name)
	delete(g.labels, name)
	g.mu.Unlock()
	switch {
	case isFed:
		c.ObserveDeleted()
	case o != nil:
		o.Stop()
		if g.onChange != nil {
			g.onChange()
		}
	}
}

// Holders returns the holders of the observed Leases (those no elector of
// this process runs) whose names start with prefix, sorted and without
// duplicates. A holder counts only until it has not renewed for its lease
// duration, as this pod observed it, like leadership.State.Holder — and not at all if
// the Lease's own renewTime is already a lease duration old by this pod's
// wall clock: a pod that has just started sees the Leases of pods that died
// earlier for the first time, and would otherwise count them for another
// lease duration. Only counting uses the wall clock (clock skew can delay or
// hasten a rebalance); taking a Lease never does.
func (g *LeaseGroup) Holders(prefix string) []string {
	return slices.Sorted(maps.Keys(g.HolderLabels(prefix, "")))
}

// HolderLabels returns the live holders of the observed Leases whose names
// start with prefix, as Holders counts them, each with the value of the
// label key on its Lease ("" if the Lease has no such label). The label is
// read from the Lease's newest version this pod observed: a holder writes
// its labels with every renewal (see election.GroupMember.Labels), so the value is the one
// of its current term.
func (g *LeaseGroup) HolderLabels(prefix, key string) map[string]string {
	values := g.HolderLabelValues(prefix, key)
	out := make(map[string]string, len(values))
	for h, v := range values {
		out[h] = v[0]
	}
	return out
}

// HolderLabelValues is HolderLabels for several keys in one walk of the
// observed Leases (a member reads its peers' N and app health on every
// look at the group): each holder's values, in the order of keys.
func (g *LeaseGroup) HolderLabelValues(prefix string, keys ...string) map[string][]string {
	type observed struct {
		o      *election.Observer
		values []string
	}
	g.mu.Lock()
	leases := make([]observed, 0, len(g.observers))
	for name, o := range g.observers {
		if strings.HasPrefix(name, prefix) {
			values := make([]string, len(keys))
			for i, k := range keys {
				values[i] = g.labels[name][k]
			}
			leases = append(leases, observed{o, values})
		}
	}
	g.mu.Unlock()
	holders := map[string][]string{}
	now := g.clock.Now()
	for _, l := range leases {
		s := l.o.Snapshot()
		stale := !s.RenewTime.IsZero() && now.Sub(s.RenewTime) >= time.Duration(s.LeaseDurationSeconds)*time.Second
		if h := s.Holder; h != "" && !stale {
			// Two Leases with one holder: keep the smaller values, so
			// that the answer does not depend on the map's order.
			if v, seen := holders[h]; !seen || slices.Compare(l.values, v) < 0 {
				holders[h] = l.values
			}
		}
	}
	return holders
}

func (g *LeaseGroup) stopObservers() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, o := range g.observers {
		o.Stop()
	}
}
