package health

import (
	"context"
	"maps"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// stepDownWitness is what a step-down relied on: the candidates that said
// they could take over (identity → the Seq of the entry that said so), the
// term it ended and when.
type stepDownWitness struct {
	relied map[string]int64
	token  int64
	at     time.Time
}

// witness records, before a step-down of the term of token, the candidates
// it relies on.
func (h *Health) witness(token int64) *stepDownWitness {
	relied := map[string]int64{}
	for id, e := range h.registry.successorCandidates() {
		relied[id] = e.Seq
	}
	return &stepDownWitness{relied: relied, token: token, at: h.clock.Now()}
}

// checkTaken follows the last step-down until someone takes over. Entries
// are written when they change, not as heartbeats, so the entry of a pod
// that died unseen still says it can take over: a step-down may rely on
// it. If the Lease is still free a lease duration after the step-down,
// longer than any taker waits (a named successor at once, the others a
// retry period, ranked ones a slot each), the entries it relied on are
// removed (unless rewritten since: their candidates are alive) and, when
// no candidate is then able to take over, this one takes the Lease back
// although its app is unhealthy: it leads degraded, as if it had never
// stepped down (reclaim). A live candidate pruned by mistake (frozen, or
// cut off from the API server) writes its entry again.
func (h *Health) checkTaken(ctx context.Context, el Elector) {
	s := el.Snapshot()
	if h.reclaim.Load() && (s.IsLeader || h.healthy.Load() || len(h.registry.healthyOthers()) > 0) {
		h.reclaim.Store(false)
	}
	h.mu.Lock()
	w := h.handedTo
	taken := w != nil && (s.FencingToken > w.token || (s.Holder != "" && s.Holder != s.Identity))
	due := w != nil && !taken && h.clock.Since(w.at) >= h.cfg.LeaseDuration
	if taken || due {
		h.handedTo = nil
	}
	h.mu.Unlock()
	if !due {
		return
	}
	logger := klog.FromContext(ctx)
	ids := slices.Sorted(maps.Keys(w.relied))
	if len(ids) > 0 {
		if err := h.registry.drop(ctx, w.relied); err != nil {
			logger.Error(err, "Could not remove the entries of the candidates that did not take over", "candidates", ids)
			return
		}
		logger.Info("No candidate took the Lease within a lease duration of this step-down: removed the entries that said they could take over", "candidates", ids)
	}
	if !h.healthy.Load() && len(h.registry.healthyOthers()) == 0 {
		logger.Info("Taking the Lease back with an unhealthy app: no other candidate is able to take over")
		h.reclaim.Store(true)
		el.TryNow()
	}
}
