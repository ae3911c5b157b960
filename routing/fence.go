package routing

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"
)

// reportedTokens bounds how many foreign tokens a fence remembers having
// logged: label mode meets one per pod at most, and an attacker who plants
// more only makes old ones be logged again.
const reportedTokens = 256

// fence guards every write that routes traffic to this pod.
//
// The Lease is the truth: a routing object's fencing token is refused (the
// write is not sent) only if some term of the Lease can have written it,
// that is if it is at most the token of the Lease as this process last saw
// it (its current term's, which only grows while sidecars run and is the new,
// low one after the Lease's tokens went back) or the token the Lease carries
// when it is read then. Any other token — not a
// number, out of the Lease's int32 range, or above both — was written by
// no term: with a stolen ServiceAccount token, or before the Lease's
// tokens went back (docs/safety.md, int32 exhaustion). It is overwritten
// as if absent, counted, and logged once; were it refused, one such write
// would pin the routing for every later leader.
type fence struct {
	leadership Leadership
	metrics    *Metrics
	// leaseToken reads the fencing token the Lease carries now
	// (spec.leaseTransitions; 0 if the Lease is missing).
	leaseToken func(context.Context) (int64, error)
	// reported holds the foreign tokens already logged, by object and
	// value, so that the resync does not log them again.
	reported *lru.Cache
}

func newFence(l Leadership, m *Metrics, leaseToken func(context.Context) (int64, error)) fence {
	return fence{leadership: l, metrics: m, leaseToken: leaseToken, reported: lru.New(reportedTokens)}
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
// It returns nil if the object may be overwritten: its token is token's or
// older, absent, or foreign (see fence), which it counts and logs.
func (f fence) newer(ctx context.Context, obj v1.Object, token int64) error {
	v, ok := obj.GetAnnotations()[FencingTokenAnnotation]
	if !ok {
		return nil
	}
	theirs, err := parseToken(v)
	if err != nil {
		f.foreign(ctx, obj, v, token, reasonMalformed, "err", err)
		return nil
	}
	if theirs <= token {
		return nil
	}
	highest := f.leadership.Snapshot().FencingToken
	if theirs > highest {
		// Above the Lease as this process last saw it. A new term writes the Lease
		// before its routing, so reading the Lease now tells a term this
		// process has not seen yet from a token no term wrote.
		onLease, err := f.leaseToken(ctx)
		if err != nil {
			return err
		}
		if theirs > onLease {
			f.foreign(ctx, obj, v, token, reasonAboveLease, "highestSeen", highest, "leaseToken", onLease)
			return nil
		}
	}
	f.metrics.refused.WithLabelValues(reasonNewerToken).Inc()
	klog.FromContext(ctx).Info("Refused a routing write: a newer term has written the object", "object", klog.KObj(obj), "fencingToken", token, "theirToken", theirs, "theirHolder", obj.GetAnnotations()[HolderAnnotation])
	return fmt.Errorf("%w: %s carries fencing token %d, newer than %d", errStale, obj.GetName(), theirs, token)
}

// foreign counts a token no term of the Lease wrote, which the caller
// overwrites, and logs it the first time this process meets it on obj.
func (f fence) foreign(ctx context.Context, obj v1.Object, theirs string, token int64, reason string, kv ...any) {
	f.metrics.overridden.WithLabelValues(reason).Inc()
	key := fmt.Sprintf("%T %s/%s %s %q", obj, obj.GetNamespace(), obj.GetName(), obj.GetUID(), theirs)
	logger := klog.FromContext(ctx)
	if _, seen := f.reported.Get(key); seen {
		logger = logger.V(4)
	}
	f.reported.Add(key, struct{}{})
	logger.Info("Overwriting a fencing token that no term of the Lease wrote", append([]any{"object", klog.KObj(obj), "reason", reason, "theirToken", theirs, "theirHolder", obj.GetAnnotations()[HolderAnnotation], "fencingToken", token}, kv...)...)
}

// parseToken reads a fencing token annotation: a decimal number in the
// range of the Lease's spec.leaseTransitions (int32, not negative).
func parseToken(v string) (int64, error) {
	t, err := strconv.ParseInt(v, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("not a fencing token: %w", err)
	}
	if t < 0 {
		return 0, fmt.Errorf("not a fencing token: %d is negative", t)
	}
	return t, nil
}

func formatToken(t int64) string { return strconv.FormatInt(t, 10) }
