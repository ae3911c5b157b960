package health

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// CandidatesAnnotation is the annotation of the candidates Lease that holds
// every candidate's entry, a JSON object identity → entry.
const CandidatesAnnotation = "leader-elector.io/candidates"

// CandidatesLeaseSuffix names the candidates Lease after the election's:
// "<lease>-candidates".
const CandidatesLeaseSuffix = "-candidates"

// maxEntries bounds the annotation (an object's annotations may hold
// 256 KiB; an entry takes about 60 bytes): a write that would go beyond
// drops the stalest entries first.
const maxEntries = 1000

// entry is one candidate's published health: Healthy is its app's state
// after the thresholds, OK whether its last probe succeeded. Seq grows with
// every write of the entry, so that a refresh is a change readers can see
// without comparing anyone's clock with their own.
type entry struct {
	Healthy bool  `json:"healthy"`
	OK      bool  `json:"ok"`
	Seq     int64 `json:"seq"`
	// Revision is the candidate's pod revision (its pod-template-hash or
	// controller-revision-hash label, or --revision), "" if unknown.
	// RevisionOrder orders revisions by their arrival: a writer whose
	// entry is new or changes revision takes one more than the highest
	// in the annotation, and keeps it after (hashes have no order; the
	// revision a rollout brings is the last to arrive).
	Revision      string `json:"revision,omitempty"`
	RevisionOrder int64  `json:"revisionOrder,omitempty"`
}

// seen is what this process knows of one entry: its last value and when
// (by this process's own clock) it last saw that value change.
type seen struct {
	entry
	// changed is zero when the entry has not been seen to change yet (it
	// was there at this process's first read).
	changed time.Time
	// since is when this process first saw the entry: one that never
	// changes is pruned staleAfter later (a pod that crashed before every
	// current reader started).
	since time.Time
}

// idleSince is when the entry last changed, or was first seen.
func (s *seen) idleSince() time.Time {
	if s.changed.IsZero() {
		return s.since
	}
	return s.changed
}

// registry keeps this candidate's entry in the candidates Lease and
// watches everyone else's. An entry counts from the first read that shows
// it until it is removed: by its candidate when it stops, by a candidate
// that relied on it and saw it not take over (Health.checkTaken), or by
// any writer once no one has seen it change for staleAfter (prune; judged
// by this process's clock alone).
type registry struct {
	namespace, name, identity string
	// revision is this candidate's pod revision (entry.Revision).
	revision          string
	staleAfter        time.Duration
	requests, watches kubernetes.Interface
	clock             clock.PassiveClock
	onChange          func()
	// ownMissing, if set, is called when a version of the Lease lacks this
	// candidate's entry after it wrote one: someone pruned it.
	ownMissing func()

	mu sync.Mutex
	// loaded is set once the first version of the Lease was read.
	loaded  bool
	entries map[string]*seen
	// seq is this candidate's last written sequence number.
	seq int64
	// ownSeen is set once a version of the Lease from the watch showed
	// this candidate's entry. The watch's versions come in order, so one
	// without it after that was pruned; one before it may just predate
	// this candidate's first write.
	ownSeen bool
}

func newRegistry(namespace, name, identity string, staleAfter time.Duration, requests, watches kubernetes.Interface, clk clock.PassiveClock, onChange func()) *registry {
	return &registry{namespace: namespace, name: name, identity: identity, staleAfter: staleAfter,
		requests: requests, watches: watches, clock: clk, onChange: onChange, entries: map[string]*seen{}}
}

// decode reads the entries of a candidates Lease; an annotation that does
// not parse counts as empty (the next write replaces it).
func decode(lease *coordinationv1.Lease) map[string]entry {
	out := map[string]entry{}
	if lease == nil {
		return out
	}
	if raw, ok := lease.Annotations[CandidatesAnnotation]; ok {
		_ = json.Unmarshal([]byte(raw), &out)
	}
	return out
}

// observe takes in one version of the candidates Lease (nil: deleted), as
// the watch delivers them.
func (r *registry) observe(lease *coordinationv1.Lease) { r.take(lease, true) }

// take takes in one version of the candidates Lease: from the watch, or
// the version a write of this candidate returned. Only the watch's count
// for ownSeen: they come in order, while a write's answer can come before
// the watch delivers the versions older than it.
func (r *registry) take(lease *coordinationv1.Lease, watched bool) {
	now := r.clock.Now()
	got := decode(lease)
	r.mu.Lock()
	changed := false
	for id, e := range got {
		s, ok := r.entries[id]
		switch {
		case !ok && !r.loaded:
			r.entries[id] = &seen{entry: e, since: now}
		case !ok:
			r.entries[id] = &seen{entry: e, changed: now, since: now}
			changed = true
		case s.entry != e:
			s.entry, s.changed = e, now
			changed = true
		}
		if id == r.identity && e.Seq > r.seq {
			// Another incarnation of this pod wrote later: go on from it.
			r.seq = e.Seq
		}
	}
	for id := range r.entries {
		if _, ok := got[id]; !ok {
			delete(r.entries, id)
			changed = true
		}
	}
	r.loaded = true
	_, own := got[r.identity]
	pruned := !own && r.ownSeen && lease != nil && watched
	r.ownSeen = r.ownSeen || (own && watched)
	r.mu.Unlock()
	if changed && r.onChange != nil {
		r.onChange()
	}
	if pruned && r.ownMissing != nil {
		r.ownMissing()
	}
}

// healthyOthers lists the other candidates whose entry is healthy and
// whose last probe succeeded: those able to take over. (Healthy alone
// would count a candidate whose app is failing too but has not reached its
// failure threshold yet: in an outage of every app the leader would hand
// over to a pod about to turn unhealthy.)
func (r *registry) healthyOthers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, s := range r.entries {
		if id != r.identity && s.Healthy && s.OK {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// own is this candidate's entry as last read from the candidates Lease;
// ok false before its first write is seen.
func (r *registry) own() (entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.entries[r.identity]
	if !ok {
		return entry{}, false
	}
	return s.entry, true
}

// prune returns m without the entries this process has not seen change
// (or, never changed, has seen) for staleAfter (never its own) and with at most maxEntries entries, the stalest dropped first.
func (r *registry) prune(m map[string]entry) map[string]entry {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := maps.Clone(m)
	for id := range out {
		s, ok := r.entries[id]
		if id != r.identity && ok && now.Sub(s.idleSince()) >= r.staleAfter {
			delete(out, id)
		}
	}
	if len(out) > maxEntries {
		ids := make([]string, 0, len(out))
		for id := range out {
			if id != r.identity {
				ids = append(ids, id)
			}
		}
		changedAt := func(id string) time.Time {
			if s, ok := r.entries[id]; ok {
				return s.idleSince()
			}
			return time.Time{}
		}
		sort.Slice(ids, func(i, j int) bool { return changedAt(ids[i]).Before(changedAt(ids[j])) })
		for _, id := range ids[:len(out)-maxEntries] {
			delete(out, id)
		}
	}
	return out
}

// publish writes this candidate's entry (its health, the next sequence
// number), or removes it when remove is set, and prunes stale entries on
// the way. Conflicts with other candidates' writes are retried on the
// newest version.
func (r *registry) publish(ctx context.Context, e entry, remove bool) error {
	leases := r.requests.CoordinationV1().Leases(r.namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		lease, err := leases.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		m := r.prune(decode(lease))
		if remove {
			if _, ok := m[r.identity]; !ok {
				return nil
			}
			delete(m, r.identity)
		} else {
			r.mu.Lock()
			r.seq = max(r.seq, m[r.identity].Seq) + 1
			e.Seq = r.seq
			e.Revision, e.RevisionOrder = r.revision, revisionOrder(m, r.identity, r.revision)
			m[r.identity] = e
			r.mu.Unlock()
		}
		return r.write(ctx, lease, m)
	})
}

// drop removes the entries of ids whose Seq is still the one given (a
// candidate that wrote since is alive), pruning stale entries on the way;
// no write when there is nothing to remove.
func (r *registry) drop(ctx context.Context, ids map[string]int64) error {
	leases := r.requests.CoordinationV1().Leases(r.namespace)
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		lease, err := leases.Get(ctx, r.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		m := decode(lease)
		removed := false
		for id, seq := range ids {
			if e, ok := m[id]; ok && id != r.identity && e.Seq == seq {
				delete(m, id)
				removed = true
			}
		}
		if !removed {
			return nil
		}
		return r.write(ctx, lease, r.prune(m))
	})
}

// write stores m as lease's entries and takes in the version written.
func (r *registry) write(ctx context.Context, lease *coordinationv1.Lease, m map[string]entry) error {
	raw, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	lease.Annotations[CandidatesAnnotation] = string(raw)
	updated, err := r.requests.CoordinationV1().Leases(r.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	r.take(updated, false)
	return nil
}

// run watches the candidates Lease until ctx ends: an informer on that one
// name (RBAC authorizes a watch with a metadata.name field selector by
// name, as for the election's Lease).
func (r *registry) run(ctx context.Context) {
	leases := r.watches.CoordinationV1().Leases(r.namespace)
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", r.name).String()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			byName(&opts)
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			byName(&opts)
			return leases.Watch(ctx, opts)
		},
	}
	logger := klog.FromContext(ctx).WithName("candidates-watch")
	observe := func(obj any) {
		if lease, ok := obj.(*coordinationv1.Lease); ok {
			r.observe(lease)
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &logger,
		ListerWatcher: lw,
		ObjectType:    &coordinationv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    observe,
			UpdateFunc: func(_, obj any) { observe(obj) },
			DeleteFunc: func(any) { r.observe(nil) },
		},
	})
	informer.RunWithContext(ctx)
}

// String names the candidates Lease, for log lines.
func (r *registry) String() string { return fmt.Sprintf("%s/%s", r.namespace, r.name) }
