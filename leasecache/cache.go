// Package leasecache keeps one Lease up to date from a watch, for an
// elector (package election) whose reads of the Lease must cost the API
// server nothing, and whose writes must never be based on a version older
// than one it has seen.
package leasecache

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Cache keeps the one Lease up to date from a watch, so that reading it
// costs the API server nothing: an idle candidate holds one watch open and
// sends no requests at all.
//
// It is a coordinationv1client.LeasesGetter for client-go's LeaseLock: Get is
// served from the cache, Create and Update go to the API server and their
// results are remembered. Every write carries the resourceVersion of the
// object it was based on, so a stale cache can only make an update fail with
// a conflict — never let two candidates both take the Lease. A conflict
// refreshes the cache with a direct read.
type Cache struct {
	namespace, name string
	requests        kubernetes.Interface
	watches         kubernetes.Interface
	// onChange is called with every version of the Lease the watch delivers
	// (nil when it is deleted), on the informer's goroutine.
	onChange func(*coordinationv1.Lease)
	// OnKeep, if set, is called with every version the cache takes in,
	// from the watch, a write or a direct read. Set it before Run.
	OnKeep func(*coordinationv1.Lease)
	// BeforeWrite, if set, returns the object to send in place of every
	// Lease this process creates or updates (the elector's holder address
	// annotation): the writes of client-go's LeaseLock and the release
	// alike pass here. Set it before Run.
	BeforeWrite func(*coordinationv1.Lease) *coordinationv1.Lease

	// syncedCh is closed once the watch has delivered the Lease's state.
	syncedCh chan struct{}

	// delivering is held while a version is taken into the cache and
	// handed to onChange, and while a reader acts on the version it was
	// served (see WhileServedCurrent), so that onChange and readers see the
	// Lease's versions in order, never an older one after a newer.
	delivering sync.Mutex

	mu     sync.Mutex
	latest *coordinationv1.Lease
	// deletedAfter is the resourceVersion of the last version held when
	// the watch said the Lease was deleted: a version no newer is of the
	// deleted object (a write's answer that arrives after the deletion's
	// event) and is not taken, or readers would see the deleted Lease
	// again, held. Cleared when a version is kept.
	deletedAfter string
	// servedCurrent is set when a reader is served latest, cleared when a
	// newer version (or a deletion) arrives.
	servedCurrent bool
	synced        bool
	// waited is set after the first read has waited for the watch to sync.
	waited bool
}

// SyncWait is how long the first read waits for the watch before it asks
// the API server directly.
const SyncWait = time.Second

// New returns a cache of the Lease namespace/name: requests sends the reads
// and writes, watches (no request timeout) the watch; onChange, if set, is
// given every version the watch delivers (nil: deleted).
func New(namespace, name string, requests, watches kubernetes.Interface, onChange func(*coordinationv1.Lease)) *Cache {
	return &Cache{namespace: namespace, name: name, requests: requests, watches: watches, onChange: onChange, syncedCh: make(chan struct{})}
}

// Run watches the Lease until ctx ends. An elector fed by a group's watch
// (election.LeaseFeed) does not run its cache: the group delivers to it.
func (c *Cache) Run(ctx context.Context) {
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.name).String()
	}
	WatchLeases(ctx, c.watches, c.namespace, byName, "lease-watch", cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(obj) },
		UpdateFunc: func(_, obj any) { c.observe(obj) },
		DeleteFunc: func(any) { c.ObserveDeleted() },
	}, c.Synced)
}

// WatchLeases runs an informer on the Leases of namespace that
// selectLeases picks (a field or label selector) until ctx ends, and calls
// synced once it has delivered their state. watches must have no request
// timeout (see election.NewClientsets).
func WatchLeases(ctx context.Context, watches kubernetes.Interface, namespace string, selectLeases func(*metav1.ListOptions), name string, handler cache.ResourceEventHandler, synced func()) {
	leases := watches.CoordinationV1().Leases(namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			selectLeases(&opts)
			return leases.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			selectLeases(&opts)
			return leases.Watch(ctx, opts)
		},
	}
	logger := klog.FromContext(ctx).WithName(name)
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &logger,
		ListerWatcher: lw,
		ObjectType:    &coordinationv1.Lease{},
		Handler:       handler,
	})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
			synced()
		}
	}()
	informer.RunWithContext(ctx)
}

// Missing reports whether the watch has delivered the Lease's state and
// the Lease does not exist.
func (c *Cache) Missing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced && c.latest == nil
}

// Synced records that the watch has delivered the Lease's state (or
// that the Lease does not exist).
func (c *Cache) Synced() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.synced {
		c.synced = true
		close(c.syncedCh)
	}
}

func (c *Cache) observe(obj any) {
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return
	}
	c.Observe(lease)
}

// Observe takes lease into the cache if it is newer than what the cache
// holds and hands it to onChange.
func (c *Cache) Observe(lease *coordinationv1.Lease) {
	c.delivering.Lock()
	defer c.delivering.Unlock()
	if c.remember(lease) && c.onChange != nil {
		c.onChange(lease)
	}
}

// ObserveDeleted records that the Lease was deleted and tells onChange.
func (c *Cache) ObserveDeleted() {
	c.delivering.Lock()
	defer c.delivering.Unlock()
	c.mu.Lock()
	if c.latest != nil {
		c.deletedAfter = c.latest.ResourceVersion
	}
	c.latest = nil
	c.servedCurrent = false
	c.mu.Unlock()
	if c.onChange != nil {
		c.onChange(nil)
	}
}

// WhileServedCurrent runs f unless a newer version of the Lease (or its
// deletion) has reached the cache since the last reader was served: a
// reader that acts on what it read must not undo what onChange has already
// been told. No version is delivered while f runs.
func (c *Cache) WhileServedCurrent(f func()) {
	c.delivering.Lock()
	defer c.delivering.Unlock()
	c.mu.Lock()
	current := c.servedCurrent
	c.mu.Unlock()
	if current {
		f()
	}
}

// remember keeps lease if it is newer than what the cache holds, and
// reports whether it did. Our own writes and the watch both feed the cache,
// and the watch may deliver an older version after our write has returned.
func (c *Cache) remember(lease *coordinationv1.Lease) bool {
	c.mu.Lock()
	if c.latest != nil && !newer(lease.ResourceVersion, c.latest.ResourceVersion) ||
		c.latest == nil && c.deletedAfter != "" && !newer(lease.ResourceVersion, c.deletedAfter) {
		c.mu.Unlock()
		return false
	}
	c.keepLocked(lease)
	c.mu.Unlock()
	if c.OnKeep != nil {
		c.OnKeep(lease)
	}
	return true
}

func (c *Cache) keepLocked(lease *coordinationv1.Lease) {
	c.latest = lease.DeepCopy()
	c.servedCurrent = false
	c.deletedAfter = ""
}

// newer compares resourceVersions. They are opaque to clients in general;
// the API server backed by etcd issues increasing integers, which is what
// this relies on. If either does not parse, the new one is taken: a wrong
// guess only costs a conflict on the next write.
func newer(candidate, current string) bool {
	a, errA := strconv.ParseUint(candidate, 10, 64)
	b, errB := strconv.ParseUint(current, 10, 64)
	if errA != nil || errB != nil {
		return candidate != current
	}
	return a > b
}

// wentBack reports whether the server's version now is older than one it
// issued before; only integers compare (see newer).
func wentBack(before, now string) bool {
	a, errA := strconv.ParseUint(before, 10, 64)
	b, errB := strconv.ParseUint(now, 10, 64)
	return errA == nil && errB == nil && b < a
}

// Get returns a copy of the cached Lease. The first read waits briefly for
// the watch to sync; while it has not — for good when the watch is not
// allowed — reads go to the API server, as with plain client-go.
func (c *Cache) Get(ctx context.Context) (*coordinationv1.Lease, error) {
	c.mu.Lock()
	wait := !c.synced && !c.waited
	c.waited = true
	c.mu.Unlock()
	if wait {
		timer := time.NewTimer(SyncWait)
		select {
		case <-c.syncedCh:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	c.mu.Lock()
	synced, latest := c.synced, c.latest
	c.mu.Unlock()
	if !synced {
		return c.refresh(ctx)
	}
	if latest == nil {
		return nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), c.name)
	}
	return c.serve(latest), nil
}

// serve returns a copy of lease for a reader, noting whether it is the
// cache's latest version.
func (c *Cache) serve(lease *coordinationv1.Lease) *coordinationv1.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.servedCurrent = c.latest == lease
	return lease.DeepCopy()
}

// refresh reads the Lease from the API server into the cache and returns
// the newest version known. A read can be overtaken by the watch (sent
// before a write, answered after the watch delivered that write); returning
// it as is would show readers a Lease older than one they have already
// seen, and a fencing token going back.
func (c *Cache) refresh(ctx context.Context) (*coordinationv1.Lease, error) {
	lease, err := c.requests.CoordinationV1().Leases(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	c.Observe(lease)
	c.mu.Lock()
	latest := c.latest
	c.mu.Unlock()
	if latest == nil {
		// Deleted by the watch meanwhile; what was read is all there is
		// (served as not current: the deletion is newer).
		c.mu.Lock()
		c.servedCurrent = false
		c.mu.Unlock()
		return lease.DeepCopy(), nil
	}
	return c.serve(latest), nil
}

// Annotation returns the annotation key of the newest version of the Lease
// the cache holds (from the watch or this process's writes), without a
// request.
func (c *Cache) Annotation(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.latest == nil {
		return "", false
	}
	v, ok := c.latest.Annotations[key]
	return v, ok
}

// Leases implements coordinationv1client.LeasesGetter for LeaseLock.
func (c *Cache) Leases(namespace string) coordinationv1client.LeaseInterface {
	return cachedLeases{LeaseInterface: c.requests.CoordinationV1().Leases(namespace), cache: c}
}

// cachedLeases serves Get from the cache; everything else goes to the API
// server.
type cachedLeases struct {
	coordinationv1client.LeaseInterface
	cache *Cache
}

func (l cachedLeases) Get(ctx context.Context, name string, _ metav1.GetOptions) (*coordinationv1.Lease, error) {
	if name != l.cache.name {
		return nil, fmt.Errorf("lease cache holds %s, not %s", l.cache.name, name)
	}
	return l.cache.Get(ctx)
}

func (l cachedLeases) Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error) {
	if l.cache.BeforeWrite != nil {
		lease = l.cache.BeforeWrite(lease)
	}
	created, err := l.LeaseInterface.Create(ctx, lease, opts)
	l.afterWrite(ctx, created, err)
	return created, err
}

func (l cachedLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	// Without a resourceVersion the API server would apply the update
	// unconditionally, whatever happened to the Lease since it was read.
	if lease.ResourceVersion == "" {
		return nil, fmt.Errorf("refusing to update lease %s/%s without a resourceVersion", lease.Namespace, lease.Name)
	}
	if l.cache.BeforeWrite != nil {
		lease = l.cache.BeforeWrite(lease)
	}
	var updated *coordinationv1.Lease
	var err error
	if SentOnce(ctx) {
		updated, err = l.cache.updateOnce(ctx, lease, opts)
	} else {
		updated, err = l.LeaseInterface.Update(ctx, lease, opts)
	}
	if apierrors.IsConflict(err) {
		l.cache.refreshAfterConflict(ctx, lease.ResourceVersion)
		return updated, err
	}
	l.afterWrite(ctx, updated, err)
	return updated, err
}

// sendOnceKey marks a context whose Lease update is sent once, without the
// REST client's retries.
type sendOnceKey struct{}

// sendOnce marks ctx so that the Lease update made with it is sent once:
// client-go's REST client otherwise waits out the Retry-After of a 429 or
// a 5xx and sends the same write again (up to 10 times). For a takeover that
// is the wrong thing to do: when 200 candidates race for a released Lease,
// priority and fairness refuses part of the herd with 429 after about a
// second in its queue, and a second later the Lease has been taken, so every
// retry is refused again as a conflict — 200 more writes on a loaded API
// server, and handovers of one to six seconds (docs/performance.md). The
// elector decides itself when to try again (package election,
// observingLock.refusedTakeover).
func SendOnce(ctx context.Context) context.Context {
	return context.WithValue(ctx, sendOnceKey{}, true)
}

// SentOnce reports whether ctx was marked by SendOnce.
func SentOnce(ctx context.Context) bool {
	once, _ := ctx.Value(sendOnceKey{}).(bool)
	return once
}

// updateOnce sends the update as the typed client does, but with no
// retries. The typed client has no option for that; its REST client's
// requests do (MaxRetries). A clientset without a REST client (client-go's
// fake, in unit tests) gets the typed update.
func (c *Cache) updateOnce(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	rc, ok := c.requests.CoordinationV1().RESTClient().(*rest.RESTClient)
	if !ok || rc == nil {
		return c.requests.CoordinationV1().Leases(lease.Namespace).Update(ctx, lease, opts)
	}
	result := &coordinationv1.Lease{}
	err := rc.Put().
		UseProtobufAsDefault().
		Namespace(lease.Namespace).
		Resource("leases").
		Name(lease.Name).
		VersionedParams(&opts, scheme.ParameterCodec).
		Body(lease).
		MaxRetries(0).
		Do(ctx).
		Into(result)
	return result, err
}

// afterWrite remembers a written Lease, and on AlreadyExists reads the Lease
// afresh for the next attempt.
func (l cachedLeases) afterWrite(ctx context.Context, written *coordinationv1.Lease, err error) {
	switch {
	case err == nil:
		l.cache.remember(written)
	case apierrors.IsAlreadyExists(err):
		if _, rerr := l.cache.refresh(ctx); rerr != nil {
			klog.FromContext(ctx).V(4).Info("Could not refresh the lease after a conflict", "err", rerr)
		}
	}
}

// refreshAfterConflict reads the Lease afresh after an update based on
// version basedOn was refused as a conflict. Normally what it reads is
// newer than basedOn. If it is older, the API server's resourceVersions
// have gone back (etcd restored from a backup without --bump-revision):
// the direct read is then the truth, and the cache takes it although it
// looks older — otherwise every write would be based on a version the
// server no longer has, and fail, for as long as the process runs.
func (c *Cache) refreshAfterConflict(ctx context.Context, basedOn string) {
	lease, err := c.requests.CoordinationV1().Leases(c.namespace).Get(ctx, c.name, metav1.GetOptions{})
	if err != nil {
		klog.FromContext(ctx).V(4).Info("Could not refresh the lease after a conflict", "err", err)
		return
	}
	if !wentBack(basedOn, lease.ResourceVersion) {
		c.Observe(lease)
		return
	}
	klog.FromContext(ctx).Info("The API server's resourceVersions went back (etcd restored?); taking its Lease as current", "lease", klog.KObj(lease), "resourceVersion", lease.ResourceVersion, "cached", basedOn)
	c.delivering.Lock()
	defer c.delivering.Unlock()
	c.mu.Lock()
	c.keepLocked(lease)
	c.mu.Unlock()
	if c.OnKeep != nil {
		c.OnKeep(lease)
	}
	if c.onChange != nil {
		c.onChange(lease)
	}
}
