package election

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// Annotate sets the annotation key to value on the Lease, fenced by the
// term: only while this pod leads, its claim is valid (before ValidUntil)
// and token is the fencing token of its current term, and only as a
// conditional update of the version of the Lease that names this pod's term
// (its resourceVersion), so that the API server refuses it if anyone wrote
// the Lease since. The write's context ends at the claim's ValidUntil or
// after a retry period, whichever comes first.
//
// It refuses with ErrNotLeader when this pod does not lead, or with one of
// the errors that wrap ErrNotAnnotated. An error that wraps neither (the API
// server did not answer in time) leaves it open whether the write was
// applied; the term still fences it either way.
//
// Renewals keep the annotation: the written Lease becomes the object the
// next renewal builds on (see observingLock.rebase), so a renewal neither
// fails on the new resourceVersion nor drops the annotation. Renewals and
// annotations are sent one at a time.
func (e *Elector) Annotate(ctx context.Context, token int64, key, value string) error {
	e.writing.Lock()
	defer e.writing.Unlock()
	for range 3 {
		s := e.tracker.Snapshot()
		if !s.IsLeader {
			if own, ok := e.tracker.ownTerm(); ok && own == token && e.tracker.holdingLease() {
				return leadership.ErrClaimExpired
			}
			return leadership.ErrNotLeader
		}
		if s.FencingToken != token {
			return fmt.Errorf("%w (current %d, given %d)", leadership.ErrTermChanged, s.FencingToken, token)
		}
		lease, err := e.cache.Get(ctx)
		if err != nil {
			return fmt.Errorf("get lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
		}
		if holder, term := ptr.Deref(lease.Spec.HolderIdentity, ""), int64(ptr.Deref(lease.Spec.LeaseTransitions, 0)); holder != e.cfg.Identity || term != token {
			return fmt.Errorf("%w (the lease names %q with token %d)", leadership.ErrTermChanged, holder, term)
		}
		if lease.Annotations[key] == value {
			return nil
		}
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations[key] = value
		left := s.ValidUntil.Sub(e.clock.Now())
		if left <= 0 {
			return leadership.ErrClaimExpired
		}
		// The write holds e.writing, which the renewals wait for: bound it
		// by a retry period too, so that a slow API server makes the
		// annotation fail (the caller may try again) rather than keep the
		// next renewal waiting until the claim has run out.
		writeCtx, cancel := context.WithTimeout(ctx, min(left, e.cfg.RetryPeriod))
		updated, err := e.cache.Leases(e.cfg.Namespace).Update(writeCtx, lease, metav1.UpdateOptions{})
		cancel()
		if apierrors.IsConflict(err) {
			// The cache has read the Lease afresh: check the term again.
			continue
		}
		if err != nil {
			return fmt.Errorf("annotate lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
		}
		e.lock.rebase(ctx, updated)
		return nil
	}
	return leadership.ErrAnnotateConflict
}

// Annotation returns the annotation key of the newest version of the Lease
// this pod has seen (from the watch or its own writes), without a request.
func (e *Elector) Annotation(key string) (string, bool) { return e.cache.Annotation(key) }
