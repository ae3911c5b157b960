package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// leaseRecord is one version of the Lease as the watch delivered it.
type leaseRecord struct {
	observed    time.Time
	holder      string
	renewTime   time.Time
	acquireTime time.Time
	transitions int32
}

// leaseHistory is every version of one Lease since the watch started: a
// watch from a resourceVersion delivers each write, so the last renewal of a
// leader that was killed is known exactly even though its successor
// overwrote it.
type leaseHistory struct {
	mu      sync.Mutex
	records []leaseRecord
	changed chan struct{}
	err     error
}

// watchLease starts recording the Lease's versions; stop ends the watch and
// waits for it (idempotent).
func watchLease(ctx context.Context, cs kubernetes.Interface, ns, name string) (*leaseHistory, func(), error) {
	h := &leaseHistory{changed: make(chan struct{})}
	leases := cs.CoordinationV1().Leases(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := leases.List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, nil, fmt.Errorf("list lease %s/%s: %w", ns, name, err)
	}
	for i := range list.Items {
		h.add(&list.Items[i])
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rv := list.ResourceVersion
		for ctx.Err() == nil {
			w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					h.fail(fmt.Errorf("watch lease %s/%s: %w", ns, name, err))
				}
				return
			}
			rv = h.consume(ctx, w, rv)
			w.Stop()
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	return h, stop, nil
}

// consume records the events of one watch until it ends and returns the
// resourceVersion to resume from.
func (h *leaseHistory) consume(ctx context.Context, w watch.Interface, rv string) string {
	for {
		select {
		case <-ctx.Done():
			return rv
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				l := ev.Object.(*coordinationv1.Lease)
				h.add(l)
				rv = l.ResourceVersion
			case watch.Bookmark:
				if l, ok := ev.Object.(*coordinationv1.Lease); ok {
					rv = l.ResourceVersion
				}
			case watch.Error:
				h.fail(fmt.Errorf("watch lease: %v", ev.Object))
				return rv
			}
		}
	}
}

func (h *leaseHistory) add(l *coordinationv1.Lease) {
	r := leaseRecord{observed: time.Now()}
	if l.Spec.HolderIdentity != nil {
		r.holder = *l.Spec.HolderIdentity
	}
	if l.Spec.RenewTime != nil {
		r.renewTime = l.Spec.RenewTime.Time
	}
	if l.Spec.AcquireTime != nil {
		r.acquireTime = l.Spec.AcquireTime.Time
	}
	if l.Spec.LeaseTransitions != nil {
		r.transitions = *l.Spec.LeaseTransitions
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r)
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *leaseHistory) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// len is the number of records so far; pass it to waitFor to look only at
// what comes next.
func (h *leaseHistory) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

// waitFor waits until a record from index `from` on satisfies match, and
// returns the whole history up to and including it.
func (h *leaseHistory) waitFor(ctx context.Context, from int, timeout time.Duration, what string, match func(leaseRecord) bool) ([]leaseRecord, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		h.mu.Lock()
		for i := from; i < len(h.records); i++ {
			if match(h.records[i]) {
				out := append([]leaseRecord(nil), h.records[:i+1]...)
				h.mu.Unlock()
				return out, nil
			}
		}
		err, changed := h.err, h.changed
		h.mu.Unlock()
		if err != nil {
			return nil, err
		}
		select {
		case <-changed:
		case <-deadline.C:
			return nil, fmt.Errorf("the Lease did not show %s within %v", what, timeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
