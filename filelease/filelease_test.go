package filelease

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/serverclock"
)

const namespace = "default"

// eventSlack bounds how long a write takes to reach a watch of another
// process's store: inotify's notification and one read of a small file.
// The poll period is the bound without inotify; the test fails if only
// the poll delivered it.
const eventSlack = pollPeriod / 2

func start(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, stop, err := Start(context.Background(), path)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(stop)
	// No client-side rate limit: the tests race requests.
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func lease(name, holder string, token int32) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}}
	if holder != "" {
		l.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(token), LeaseDurationSeconds: ptr.To[int32](15)}
	}
	return l
}

// Two processes' stores on one file: one update of a version wins, the
// other is refused as a conflict, and resourceVersions only grow.
func TestConflictingUpdatesOneWins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	a, b := start(t, path), start(t, path)
	ctx := context.Background()
	created, err := a.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "", 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "", 0), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}
	fromA, fromB := created.DeepCopy(), created.DeepCopy()
	fromA.Spec.HolderIdentity, fromB.Spec.HolderIdentity = ptr.To("a"), ptr.To("b")
	won, err := a.CoordinationV1().Leases(namespace).Update(ctx, fromA, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoordinationV1().Leases(namespace).Update(ctx, fromB, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("update of a stale version: %v, want Conflict", err)
	}
	if rvOf(won) <= rvOf(created) {
		t.Fatalf("resourceVersion went from %s to %s", created.ResourceVersion, won.ResourceVersion)
	}
	got, err := b.CoordinationV1().Leases(namespace).Get(ctx, "l", metav1.GetOptions{})
	if err != nil || *got.Spec.HolderIdentity != "a" || got.UID != created.UID {
		t.Fatalf("get: %v, %+v", err, got)
	}
}

// A watch in one process sees another process's writes, in order, within
// eventSlack, and its deletion.
func TestWatchSeesOtherProcess(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	writer, watcher := start(t, path), start(t, path)
	ctx := context.Background()
	w, err := watcher.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=l"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	leases := writer.CoordinationV1().Leases(namespace)
	created, err := leases.Create(ctx, lease("l", "", 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(ctx, lease("other", "", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created.Spec.HolderIdentity = ptr.To("x")
	if _, err := leases.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := leases.Delete(ctx, "l", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, want := range []watch.EventType{watch.Added, watch.Modified, watch.Deleted} {
		select {
		case ev := <-w.ResultChan():
			l := ev.Object.(*coordinationv1.Lease)
			if ev.Type != want || l.Name != "l" || rvOf(l) <= last {
				t.Fatalf("event %s %s at %s, want %s of l after %d", ev.Type, l.Name, l.ResourceVersion, want, last)
			}
			last = rvOf(l)
		case <-time.After(eventSlack):
			t.Fatalf("no %s event within %v", want, eventSlack)
		}
	}
}

// A watch list (client-go's sendInitialEvents) gets the current Leases,
// then the bookmark that ends them.
func TestWatchList(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	c := start(t, path)
	ctx := context.Background()
	if _, err := c.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := c.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	if ev.Type != watch.Added || ev.Object.(*coordinationv1.Lease).Name != "l" {
		t.Fatalf("first event %s, want the Lease added", ev.Type)
	}
	ev = <-w.ResultChan()
	if l := ev.Object.(*coordinationv1.Lease); ev.Type != watch.Bookmark || l.Annotations[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("second event %s, want the initial events' end", ev.Type)
	}
}

// Deleting the file (or both files) never brings a fencing token back: the
// Lease created anew has a creation time whose seconds since the token
// epoch are at least the highest token written, which the elector's next
// term exceeds; its resourceVersions continue above the old ones.
func TestDeletedFileKeepsTokensAndVersions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	c := start(t, path)
	ctx := context.Background()
	far := int32(time.Since(serverclock.Epoch)/time.Second) + 1000
	written, err := c.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "a", far), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	again, err := c.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "", 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if floor := int32(again.CreationTimestamp.Sub(serverclock.Epoch) / time.Second); floor < far {
		t.Fatalf("re-created Lease's token floor %d is below the token %d written before", floor, far)
	}
	if rvOf(again) <= rvOf(written) {
		t.Fatalf("resourceVersion went back from %s to %s", written.ResourceVersion, again.ResourceVersion)
	}
}

// A file truncated, replaced by an older copy, or unreadable is refused
// with one clear error, by a running store and at start; deleting it
// starts over.
func TestBadFileRefused(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		spoil func(t *testing.T, path string, older []byte)
		want  string
	}{
		{"truncated", func(t *testing.T, path string, _ []byte) { truncate(t, path) }, "is corrupt"},
		{"replaced by an older copy", func(t *testing.T, path string, older []byte) { writeFile(t, path, older) }, "went back"},
		// Unreadable even to root, which reads a file without permissions.
		{"unreadable", func(t *testing.T, path string, _ []byte) { replaceByDirectory(t, path) }, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "lease.json")
			c := start(t, path)
			leases := c.CoordinationV1().Leases(namespace)
			l, err := leases.Create(ctx, lease("l", "a", 1), metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			older := readFile(t, path)
			l.Spec.LeaseTransitions = ptr.To[int32](2)
			if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, path, older)
			if _, err := leases.Get(ctx, "l", metav1.GetOptions{}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("get: %v, want an error saying %q", err, tc.want)
			}
			if _, _, err := Start(ctx, path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error saying %q", err, tc.want)
			}
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if _, err := leases.Create(ctx, lease("l", "", 0), metav1.CreateOptions{}); err != nil {
				t.Fatalf("create after the file was deleted: %v", err)
			}
		})
	}
}

// serveInProcess serves path in the test's process and returns the server,
// for its store's test hooks, and a client of it.
func serveInProcess(t *testing.T, path string) (*Server, kubernetes.Interface) {
	t.Helper()
	s := newServer(path, testLogger(t))
	cfg, stop, err := s.serve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return s, kubernetes.NewForConfigOrDie(cfg)
}

// A write that fails (a full disk) changes nothing and is an error.
func TestFailedWriteChangesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	s, c := serveInProcess(t, path)
	s.store.beforeWrite = func() error { return errors.New("no space left on device") }
	if _, err := c.CoordinationV1().Leases(namespace).Create(context.Background(), lease("l", "a", 1), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("create on a full disk: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the failed write left a file: %v", err)
	}
}

func truncate(t *testing.T, path string) {
	t.Helper()
	b := readFile(t, path)
	writeFile(t, path, b[:len(b)/2])
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func replaceByDirectory(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
}

// Racing updates of one version from two processes' stores: in every
// round exactly one wins and the other is refused as a conflict, also
// when the loser's write is retried on the winner's newer state.
func TestRacingUpdatesExactlyOneWins(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	clients := []kubernetes.Interface{start(t, path), start(t, path)}
	ctx := context.Background()
	if _, err := clients[0].CoordinationV1().Leases(namespace).Create(ctx, lease("l", "", 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	for round := range rounds {
		base, err := clients[0].CoordinationV1().Leases(namespace).Get(ctx, "l", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, len(clients))
		for i, c := range clients {
			go func() {
				l := base.DeepCopy()
				l.Spec.HolderIdentity = ptr.To(string(rune('a' + i)))
				_, err := c.CoordinationV1().Leases(namespace).Update(ctx, l, metav1.UpdateOptions{})
				errs <- err
			}()
		}
		won := 0
		for range clients {
			switch err := <-errs; {
			case err == nil:
				won++
			case !apierrors.IsConflict(err):
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d updates of one version won, want exactly 1", round, won)
		}
	}
}

// The lease file deleted by hand is a deletion the watches of every
// process deliver, within eventSlack.
func TestWatchSeesFileDeleted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.json")
	writer, watcher := start(t, path), start(t, path)
	ctx := context.Background()
	created, err := writer.CoordinationV1().Leases(namespace).Create(ctx, lease("l", "a", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := watcher.CoordinationV1().Leases(namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if l := ev.Object.(*coordinationv1.Lease); ev.Type != watch.Deleted || l.Name != "l" || rvOf(l) <= rvOf(created) {
			t.Fatalf("event %s of %s at %s, want l deleted after %s", ev.Type, l.Name, l.ResourceVersion, created.ResourceVersion)
		}
	case <-time.After(eventSlack):
		t.Fatalf("no deletion within %v", eventSlack)
	}
}
