package filelease

import (
	"slices"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// historyLength is how many changes a watch can resume after: a watch
// from an older resourceVersion is answered 410 Gone and its reflector
// lists afresh, as with the API server's watch cache.
const historyLength = 1000

// watcherBuffer is how many events a watcher may lag behind before it is
// closed (its reflector then watches again from where it was).
const watcherBuffer = 100

// event is one change of a Lease, at the resourceVersion rv.
type event struct {
	typ   watch.EventType
	lease *coordinationv1.Lease
	rv    int64
}

// hub holds the store's state as last read and hands each change to the
// watches. Every read and write of the store goes through apply, so that
// the watches see every state a client has seen.
type hub struct {
	mu      sync.Mutex
	current state
	loaded  bool
	// history is the changes after historyStart, oldest first.
	history      []event
	historyStart int64
	watchers     map[*watcher]struct{}
	// tickets orders the reads of the store: a state read under an older
	// ticket than one applied already is stale, not a reset.
	tickets, applied int64
}

type watcher struct {
	match  func(*coordinationv1.Lease) bool
	events chan event
	// closed is closed when the hub drops the watcher (it lagged, or the
	// store's history was reset).
	closed chan struct{}
}

func newHub() *hub { return &hub{watchers: map[*watcher]struct{}{}} }

// ticket is taken before a read of the store (after a write), for apply.
func (h *hub) ticket() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tickets++
	return h.tickets
}

// apply makes next, read under ticket, the current state and sends the
// differences to the watches. A read that overtook it (a higher ticket
// applied) is stale and dropped. A state older than the current one
// otherwise (the high-water mark and the records file were both deleted)
// resets the history: every watch ends and its reflector lists afresh.
func (h *hub) apply(ticket int64, next state) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ticket < h.applied {
		return
	}
	h.applied = ticket
	if !h.loaded || next.resourceVersion < h.current.resourceVersion {
		h.current, h.loaded = next, true
		h.history, h.historyStart = nil, next.resourceVersion
		for w := range h.watchers {
			h.dropLocked(w)
		}
		return
	}
	if next.resourceVersion == h.current.resourceVersion {
		return
	}
	for _, ev := range diff(h.current, next) {
		h.history = append(h.history, ev)
		for w := range h.watchers {
			if !w.match(ev.lease) {
				continue
			}
			select {
			case w.events <- ev:
			default:
				h.dropLocked(w)
			}
		}
	}
	if n := len(h.history) - historyLength; n > 0 {
		h.historyStart = h.history[n-1].rv
		h.history = slices.Delete(h.history, 0, n)
	}
	h.current = next
}

func (h *hub) dropLocked(w *watcher) {
	delete(h.watchers, w)
	close(w.closed)
}

// diff lists the changes from prev to next, in the order of their
// resourceVersions; a deletion is at next's.
func diff(prev, next state) []event {
	var out []event
	for _, k := range sortedKeys(next.leases) {
		l := next.leases[k]
		old, existed := prev.leases[k]
		switch {
		case !existed:
			out = append(out, event{typ: watch.Added, lease: l, rv: rvOf(l)})
		case old.ResourceVersion != l.ResourceVersion:
			out = append(out, event{typ: watch.Modified, lease: l, rv: rvOf(l)})
		}
	}
	for _, k := range sortedKeys(prev.leases) {
		if _, ok := next.leases[k]; !ok {
			gone := prev.leases[k].DeepCopy()
			gone.ResourceVersion = strconv.FormatInt(next.resourceVersion, 10)
			out = append(out, event{typ: watch.Deleted, lease: gone, rv: next.resourceVersion})
		}
	}
	slices.SortStableFunc(out, func(a, b event) int { return int(a.rv - b.rv) })
	return out
}

func rvOf(l *coordinationv1.Lease) int64 {
	rv, _ := strconv.ParseInt(l.ResourceVersion, 10, 64)
	return rv
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// errTooOld is watch's answer for a resourceVersion older than the
// history.
type errTooOld struct{ oldest int64 }

// watch registers a watcher of the Leases match picks, from resourceVersion
// from: the changes after it are queued first. initial (from < 0) queues
// the current Leases as additions instead, and returns the current
// resourceVersion for the bookmark that ends them.
func (h *hub) watch(match func(*coordinationv1.Lease) bool, from int64) (*watcher, int64, *errTooOld) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var queued []event
	switch {
	case from < 0:
		for _, k := range sortedKeys(h.current.leases) {
			if l := h.current.leases[k]; match(l) {
				queued = append(queued, event{typ: watch.Added, lease: l, rv: rvOf(l)})
			}
		}
	case from < h.historyStart || from > h.current.resourceVersion:
		// Older than the history, or newer than the store after a reset
		// (the records and the high-water mark were both deleted).
		return nil, 0, &errTooOld{oldest: h.historyStart}
	default:
		for _, ev := range h.history {
			if ev.rv > from && match(ev.lease) {
				queued = append(queued, ev)
			}
		}
	}
	w := &watcher{match: match, events: make(chan event, watcherBuffer+len(queued)), closed: make(chan struct{})}
	for _, ev := range queued {
		w.events <- ev
	}
	h.watchers[w] = struct{}{}
	return w, h.current.resourceVersion, nil
}

// stop unregisters w.
func (h *hub) stop(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		h.dropLocked(w)
	}
}

// isLoaded reports whether the hub has a state to watch from.
func (h *hub) isLoaded() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.loaded
}
