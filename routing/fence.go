package routing

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// fence guards every write that routes traffic to this pod.
type fence struct {
	leadership Leadership
	metrics    *Metrics
}

// window is called right before a write for the term token. It returns a
// context that ends when this pod's claim on that term ends (validUntil),
// so the request cannot be sent, or waited for, after it; or errStale if
// this pod does not claim that term at this moment. The claim is read from
// the election's time-bounded state, so a pod that was paused learns here,
// before it writes, that its claim has lapsed.
func (f fence) window(ctx context.Context, token int64) (context.Context, context.CancelFunc, error) {
	s := f.leadership.Snapshot()
	// Deadline carries the monotonic reading the claim is measured on, so a
	// step of the wall clock cannot stretch the window (ValidUntil would).
	left := time.Until(s.Deadline)
	if !s.IsLeader || s.FencingToken != token || left <= 0 {
		f.metrics.refused.WithLabelValues(reasonLapsed).Inc()
		klog.FromContext(ctx).Info("Refused a routing write: this pod no longer leads the term", "fencingToken", token, "isLeader", s.IsLeader, "currentToken", s.FencingToken)
		return nil, nil, fmt.Errorf("%w: the claim on term %d has lapsed", errStale, token)
	}
	wctx, cancel := context.WithDeadline(ctx, s.Deadline)
	return wctx, cancel, nil
}

// newer reports, and counts, an object written by a term newer than token:
// this pod's view of the election is behind, and it must not overwrite it.
func (f fence) newer(ctx context.Context, obj v1.Object, token int64) error {
	theirs, ok := tokenOf(obj)
	if !ok || theirs <= token {
		return nil
	}
	f.metrics.refused.WithLabelValues(reasonNewerToken).Inc()
	klog.FromContext(ctx).Info("Refused a routing write: a newer term has written the object", "object", klog.KObj(obj), "fencingToken", token, "theirToken", theirs, "theirHolder", obj.GetAnnotations()[HolderAnnotation])
	return fmt.Errorf("%w: %s carries fencing token %d, newer than %d", errStale, obj.GetName(), theirs, token)
}

// tokenOf reads the fencing token annotation of obj.
func tokenOf(obj v1.Object) (int64, bool) {
	v, ok := obj.GetAnnotations()[FencingTokenAnnotation]
	if !ok {
		return 0, false
	}
	t, err := strconv.ParseInt(v, 10, 64)
	return t, err == nil
}

func formatToken(t int64) string { return strconv.FormatInt(t, 10) }
