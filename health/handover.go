package health

import "time"

// handoverDue reports whether a leader of an older revision should hand
// over now (Config.HandoverAfter): its own app is healthy, and a candidate
// of the newest revision has been able to take over for HandoverAfter,
// as this process has seen it on its loop's ticks (a probe period apart,
// or sooner on a change of the candidates Lease). A leader whose app is
// unhealthy steps down by the health rule instead.
func (h *Health) handoverDue(leading bool) bool {
	if h.cfg.HandoverAfter <= 0 || h.cfg.Revision == "" || !leading || !h.healthy.Load() || !h.registry.newerRevisionReady() {
		h.newerSince = time.Time{}
		return false
	}
	now := h.clock.Now()
	if h.newerSince.IsZero() {
		h.newerSince = now
	}
	return now.Sub(h.newerSince) >= h.cfg.HandoverAfter
}

// newerRevisionReady reports whether this candidate's revision is not the
// newest one in the candidates Lease (see newestRevision) and a candidate
// of the newest is able to take over now.
func (r *registry) newerRevisionReady() bool {
	ready := r.successorCandidates()
	r.mu.Lock()
	all := make(map[string]entry, len(r.entries))
	for id, s := range r.entries {
		all[id] = s.entry
	}
	r.mu.Unlock()
	newest := newestRevision(all)
	if newest == r.revision {
		return false
	}
	for _, e := range ready {
		if e.Revision == newest {
			return true
		}
	}
	return false
}
