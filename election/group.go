package election

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
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// LeaseGroup is one watch over a set of Leases that share a label, for
// partition mode: it feeds the caches of the electors that registered a Lease
// of the group (see GroupMember.Feed), so that N partition Leases cost one watch
// and no reads, and it observes every other Lease of the group (the other
// pods' membership Leases) with the same time-bounded view of their holders
// as an elector has of its own Lease.
type LeaseGroup struct {
	namespace string
	selector  labels.Selector
	watches   kubernetes.Interface
	clock     clock.WithDelayedExecution
	// renewDeadline is only needed by the observers' trackers, which never
	// hold a Lease themselves (nor use their lease duration, twice it).
	renewDeadline time.Duration
	onChange      func()

	mu        sync.Mutex
	running   bool
	fed       map[string]*leaseCache
	observers map[string]*tracker
	// labels are the observed Leases' labels, from their newest version.
	labels map[string]map[string]string
}

// NewLeaseGroup returns a group for the Leases in namespace that carry all
// of selector's labels. watches must have no request timeout (see
// NewClientsets). onChange, if set, is called (without blocking) when the
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
		// Any positive value: observers never claim a Lease.
		renewDeadline: time.Second,
		onChange:      onChange,
		fed:           map[string]*leaseCache{},
		observers:     map[string]*tracker{},
		labels:        map[string]map[string]string{},
	}
}

// feed registers an elector's cache; it must happen before Run.
func (g *LeaseGroup) feed(c *leaseCache) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.running {
		return fmt.Errorf("lease group %s: elector for %s registered after the watch started", g.selector, c.name)
	}
	if c.namespace != g.namespace {
		return fmt.Errorf("lease group in namespace %s cannot feed lease %s/%s", g.namespace, c.namespace, c.name)
	}
	g.fed[c.name] = c
	return nil
}

// Run watches the group until ctx ends.
func (g *LeaseGroup) Run(ctx context.Context) {
	g.mu.Lock()
	g.running = true
	g.mu.Unlock()
	defer g.stopObservers()

	bySelector := func(opts *metav1.ListOptions) { opts.LabelSelector = g.selector.String() }
	runLeaseInformer(ctx, g.watches, g.namespace, bySelector, "lease-group-watch", cache.ResourceEventHandlerFuncs{
		AddFunc:    g.observe,
		UpdateFunc: func(_, obj any) { g.observe(obj) },
		DeleteFunc: g.observeDeleted,
	}, g.markSynced)
}

// markSynced tells every fed cache that the watch has delivered the
// group's state.
func (g *LeaseGroup) markSynced() {
	g.mu.Lock()
	fed := make([]*leaseCache, 0, len(g.fed))
	for _, c := range g.fed {
		fed = append(fed, c)
	}
	g.mu.Unlock()
	for _, c := range fed {
		c.markSynced()
	}
}

func (g *LeaseGroup) observe(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	g.mu.Lock()
	c, isFed := g.fed[lease.Name]
	var t *tracker
	if !isFed {
		t = g.observers[lease.Name]
		if t == nil {
			t = newTracker(g.clock, g.namespace, lease.Name, "", g.renewDeadline, 2*g.renewDeadline)
			t.onChange = g.onChange
			g.observers[lease.Name] = t
		}
		g.labels[lease.Name] = lease.Labels
	}
	g.mu.Unlock()
	if isFed {
		c.observe(lease)
		return
	}
	t.observeRead(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)))
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
	t := g.observers[name]
	delete(g.observers, name)
	delete(g.labels, name)
	g.mu.Unlock()
	switch {
	case isFed:
		c.observeDeleted()
	case t != nil:
		t.stop()
		if g.onChange != nil {
			g.onChange()
		}
	}
}

// Holders returns the holders of the observed Leases (those no elector of
// this process runs) whose names start with prefix, sorted and without
// duplicates. A holder counts only until it has not renewed for its lease
// duration, as this pod observed it, like State.Holder — and not at all if
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
// its labels with every renewal (see GroupMember.Labels), so the value is the one
// of its current term.
func (g *LeaseGroup) HolderLabels(prefix, key string) map[string]string {
	type observed struct {
		t     *tracker
		value string
	}
	g.mu.Lock()
	leases := make([]observed, 0, len(g.observers))
	for name, t := range g.observers {
		if strings.HasPrefix(name, prefix) {
			leases = append(leases, observed{t, g.labels[name][key]})
		}
	}
	g.mu.Unlock()
	holders := map[string]string{}
	now := g.clock.Now()
	for _, l := range leases {
		s := l.t.Snapshot()
		stale := !s.RenewTime.IsZero() && now.Sub(s.RenewTime) >= time.Duration(s.LeaseDurationSeconds)*time.Second
		if h := s.Holder; h != "" && !stale {
			// Two Leases with one holder: keep the smaller value, so that
			// the answer does not depend on the map's order.
			if v, seen := holders[h]; !seen || l.value < v {
				holders[h] = l.value
			}
		}
	}
	return holders
}

func (g *LeaseGroup) stopObservers() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, t := range g.observers {
		t.stop()
	}
}
