package leasecache

import (
	"context"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/internal/leasetest"
)

const (
	testNamespace = "default"
	testName      = "my-app"
)

// listWatchFake is a fake clientset that serves list and watch but refuses
// streaming watch-lists, so that the reflector falls back to list and watch.
func listWatchFake(objs ...runtime.Object) *fake.Clientset {
	cs := fake.NewClientset(objs...)
	leasetest.RefuseWatchLists(cs)
	return cs
}

func testLease(holder string, transitions int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			LeaseTransitions:     ptr.To(transitions),
		},
	}
}

// startCache runs a cache until the test ends and waits for it to sync.
func startCache(t *testing.T, requests, watches *fake.Clientset) (*Cache, *changes) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	seen := &changes{}
	c := New(testNamespace, testName, requests, watches, seen.add)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-c.syncedCh:
	case <-time.After(10 * time.Second):
		t.Fatal("cache did not sync")
	}
	return c, seen
}

type changes struct {
	mu     sync.Mutex
	leases []*coordinationv1.Lease
}

func (c *changes) add(l *coordinationv1.Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.leases = append(c.leases, l)
}

func (c *changes) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.leases)
}

func TestCacheServesReadsWithoutRequests(t *testing.T) {
	t.Parallel()
	requests := fake.NewClientset()
	watches := listWatchFake(testLease("pod-a", 2))
	c, seen := startCache(t, requests, watches)
	for range 5 {
		l, err := c.Leases(testNamespace).Get(context.Background(), testName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *l.Spec.HolderIdentity != "pod-a" {
			t.Fatalf("holder %q", *l.Spec.HolderIdentity)
		}
		// A copy: client-go's LeaseLock writes into what it reads.
		l.Spec.HolderIdentity = ptr.To("mutated")
	}
	if n := len(requests.Actions()); n != 0 {
		t.Errorf("reads sent %d requests: %v", n, requests.Actions())
	}
	if seen.count() != 1 {
		t.Errorf("onChange called %d times, want 1", seen.count())
	}
}

func TestCacheFollowsTheWatch(t *testing.T) {
	t.Parallel()
	first := testLease("pod-a", 2)
	first.ResourceVersion = "5"
	watches := listWatchFake(first)
	c, seen := startCache(t, fake.NewClientset(), watches)
	// The fake keeps whatever resourceVersion it is given; the API server
	// would issue a higher one.
	updated := testLease("pod-b", 3)
	updated.ResourceVersion = "6"
	if _, err := watches.CoordinationV1().Leases(testNamespace).Update(context.Background(), updated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSeen := func(n int) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return seen.count() >= n, nil
		}); err != nil {
			t.Fatalf("onChange called %d times, want %d: %v", seen.count(), n, err)
		}
	}
	waitSeen(2)
	l, err := c.Get(context.Background())
	if err != nil || *l.Spec.HolderIdentity != "pod-b" {
		t.Fatalf("after the watch event: %v %v", l, err)
	}
	if err := watches.CoordinationV1().Leases(testNamespace).Delete(context.Background(), testName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSeen(3)
	if _, err := c.Get(context.Background()); !apierrors.IsNotFound(err) {
		t.Errorf("after deletion: %v, want NotFound", err)
	}
}

func TestCacheKeepsTheNewestVersion(t *testing.T) {
	c := New(testNamespace, testName, fake.NewClientset(), fake.NewClientset(), nil)
	v := func(rv string) *coordinationv1.Lease {
		l := testLease("pod-a", 1)
		l.ResourceVersion = rv
		return l
	}
	for _, tc := range []struct {
		rv   string
		kept bool
	}{{"10", true}, {"9", false}, {"10", false}, {"11", true}, {"x", true}} {
		if got := c.remember(v(tc.rv)); got != tc.kept {
			t.Errorf("remember(rv %s) = %v, want %v", tc.rv, got, tc.kept)
		}
	}
}

func TestCacheReadsFromTheServerUntilSynced(t *testing.T) {
	t.Parallel()
	requests := fake.NewClientset(testLease("pod-a", 2))
	// A watch that is refused outright: the cache never syncs.
	watches := fake.NewClientset()
	watches.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), testName, nil)
	})
	watches.PrependReactor("list", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(coordinationv1.Resource("leases"), testName, nil)
	})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c := New(testNamespace, testName, requests, watches, nil)
	go c.Run(ctx)
	for range 3 {
		l, err := c.Get(ctx)
		if err != nil || *l.Spec.HolderIdentity != "pod-a" {
			t.Fatalf("get: %v %v", l, err)
		}
	}
	gets := 0
	for _, a := range requests.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets != 3 {
		t.Errorf("%d GETs to the API server, want 3 (one per read without a watch)", gets)
	}
}

func TestCachedUpdates(t *testing.T) {
	requests := fake.NewClientset(testLease("pod-a", 2))
	c := New(testNamespace, testName, requests, fake.NewClientset(), nil)
	leases := c.Leases(testNamespace)

	noVersion := testLease("me", 3)
	if _, err := leases.Update(context.Background(), noVersion, metav1.UpdateOptions{}); err == nil {
		t.Errorf("an update without a resourceVersion was sent")
	}

	// A conflict refreshes the cache from the server.
	requests.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), testName, nil)
	})
	stale := testLease("", 1)
	stale.ResourceVersion = "1"
	if _, err := leases.Update(context.Background(), stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update: %v, want the conflict", err)
	}
	c.mu.Lock()
	latest := c.latest
	c.mu.Unlock()
	if latest == nil || *latest.Spec.HolderIdentity != "pod-a" {
		t.Errorf("after a conflict the cache holds %v, want the server's Lease", latest)
	}
}

// TestCacheReadNeverGoesBack: a direct read answered after the watch has
// delivered a newer version returns the newer version.
func TestCacheReadNeverGoesBack(t *testing.T) {
	old := testLease("pod-a", 17)
	old.ResourceVersion = "100"
	requests := fake.NewClientset(old)
	c := New(testNamespace, testName, requests, fake.NewClientset(), nil)
	newer := testLease("pod-b", 18)
	newer.ResourceVersion = "101"
	c.remember(newer) // the watch got there first
	l, err := c.refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := *l.Spec.LeaseTransitions; got != 18 {
		t.Errorf("refresh returned token %d, want the newer 18", got)
	}
}

// A reader that was served a version and acts on it after the watch has
// delivered a newer one (or the deletion) must not act: onChange already
// told the tracker about the newer version, and acting on the older one
// would show a fencing token going back.
func TestReaderActsOnlyOnTheCurrentVersion(t *testing.T) {
	version := func(rv string, transitions int32) *coordinationv1.Lease {
		l := testLease("pod-a", transitions)
		l.ResourceVersion = rv
		return l
	}
	for _, tc := range []struct {
		name  string
		after func(c *Cache)
		acts  bool
	}{
		{"nothing newer", func(*Cache) {}, true},
		{"an older version offered", func(c *Cache) { c.Observe(version("9", 1)) }, true},
		{"a newer version delivered", func(c *Cache) { c.Observe(version("11", 2)) }, false},
		{"deleted", func(c *Cache) { c.ObserveDeleted() }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var delivered []string
			c := New(testNamespace, testName, fake.NewClientset(), fake.NewClientset(), func(l *coordinationv1.Lease) {
				if l != nil {
					delivered = append(delivered, l.ResourceVersion)
				}
			})
			c.Observe(version("10", 1))
			c.Synced()
			served, err := c.Get(context.Background())
			if err != nil || served.ResourceVersion != "10" {
				t.Fatalf("get = %v, %v; want version 10", served, err)
			}
			tc.after(c)
			acted := false
			c.WhileServedCurrent(func() { acted = true })
			if acted != tc.acts {
				t.Errorf("acted on the version served = %v, want %v (delivered %v)", acted, tc.acts, delivered)
			}
		})
	}
}

// TestCacheAfterResourceVersionsGoBack: after an etcd restore without
// --bump-revision the server's resourceVersions are lower than the cached
// one. The direct read after the conflict is taken as the truth, so the next
// write succeeds instead of conflicting for as long as the process runs.
func TestCacheAfterResourceVersionsGoBack(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	restored := testLease("pod-b", 3)
	restored.ResourceVersion = "5"
	requests := fake.NewClientset(restored)
	// The server refuses any update not based on its current version.
	requests.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if lease.ResourceVersion != "5" {
			return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), lease.Name, nil)
		}
		return false, nil, nil
	})
	c := New(testNamespace, testName, requests, requests, nil)
	// What the cache held before the restore.
	before := testLease("pod-b", 9)
	before.ResourceVersion = "100"
	c.remember(before)
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()

	leases := c.Leases(testNamespace)
	for attempt := range 2 {
		lease, err := leases.Get(ctx, testName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case attempt == 0 && !apierrors.IsConflict(err):
			t.Fatalf("first update, based on the pre-restore version: error %v, want a conflict", err)
		case attempt == 1 && err != nil:
			t.Fatalf("update after the conflict: %v (the cache kept a version the server no longer has)", err)
		}
	}
}

// TestCacheForgetsTheDeletedVersion: after the watch says the Lease was
// deleted, an answer to a write made before the deletion (it arrives
// later) is not taken back into the cache: readers get NotFound, not the
// deleted Lease still naming its holder. A re-created Lease (a newer
// version) is taken.
func TestCacheForgetsTheDeletedVersion(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	c := New(testNamespace, testName, fake.NewClientset(), fake.NewClientset(), nil)
	c.mu.Lock()
	c.synced = true
	c.mu.Unlock()
	v := func(rv string) *coordinationv1.Lease {
		l := testLease("pod-a", 7)
		l.ResourceVersion = rv
		return l
	}
	c.Observe(v("10")) // the renewal, as the watch delivered it
	c.ObserveDeleted()
	if c.remember(v("10")) {
		t.Error("the renewal's answer, arriving after the deletion, was taken back into the cache")
	}
	if l, err := c.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("read after the deletion: %v, %v; want NotFound", l, err)
	}
	if !c.remember(v("11")) {
		t.Error("a newer version (the Lease re-created) was not taken")
	}
	if l, err := c.Get(ctx); err != nil || l.ResourceVersion != "11" {
		t.Errorf("read after the re-creation: %v, %v; want version 11", l, err)
	}
}
