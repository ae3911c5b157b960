package health

import (
	"crypto/sha256"
	"encoding/binary"
	"strconv"
)

// revisionOrder is the RevisionOrder of identity's entry of revision in m:
// its current one if it already has that revision, else one above every
// entry's; none (0, the oldest) for an unknown revision.
func revisionOrder(m map[string]entry, identity, revision string) int64 {
	if revision == "" {
		return 0
	}
	if e, ok := m[identity]; ok && e.Revision == revision && e.RevisionOrder > 0 {
		return e.RevisionOrder
	}
	var highest int64
	for _, e := range m {
		highest = max(highest, e.RevisionOrder)
	}
	return highest + 1
}

// successorCandidates are the other candidates able to take over now
// (healthyOthers: fresh, healthy, last probe ok) with their entries.
func (r *registry) successorCandidates() map[string]entry {
	ids := r.healthyOthers()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]entry, len(ids))
	for _, id := range ids {
		if s, ok := r.entries[id]; ok {
			out[id] = s.entry
		}
	}
	return out
}

// Successor names the candidate a graceful release of the term of token
// hands the Lease over to (election.Config.Successor): among the other
// candidates able to take over now (fresh, healthy, last probe ok), those
// of the newest revision, and of those the first by rank(identity,
// token). "" when there is none: the release is a race, as without a
// successor. A terminating pod is no candidate: it removes its entry when
// it stops, and its elector no longer campaigns, so if it is named anyway
// (its removal not yet seen) the others take over a retry period later.
func (h *Health) Successor(token int64) string {
	return pickSuccessor(h.registry.successorCandidates(), token)
}

// pickSuccessor is Successor's rule on the candidates' entries.
func pickSuccessor(candidates map[string]entry, token int64) string {
	newest := newestRevision(candidates)
	best, bestRank := "", uint64(0)
	for id, e := range candidates {
		if e.Revision != newest {
			continue
		}
		r := rank(id, token)
		if best == "" || r < bestRank || (r == bestRank && id < best) {
			best, bestRank = id, r
		}
	}
	return best
}

// newestRevision is the revision that arrived last among the entries: the
// one whose earliest RevisionOrder is the highest (a pod of an older
// revision that restarts takes a new order, but its revision keeps the
// older orders of its peers). Ties, which one writer at a time cannot
// make, go to the greater revision string, so every reader agrees.
func newestRevision(entries map[string]entry) string {
	first := map[string]int64{}
	for _, e := range entries {
		if o, ok := first[e.Revision]; !ok || e.RevisionOrder < o {
			first[e.Revision] = e.RevisionOrder
		}
	}
	newest, at := "", int64(-1)
	for rev, o := range first {
		if o > at || (o == at && rev > newest) {
			newest, at = rev, o
		}
	}
	return newest
}

// rank orders candidates for the term of token: a hash of both, so that
// every reader computes the same order, and the first place moves from
// term to term instead of always falling to the same pod.
func rank(identity string, token int64) uint64 {
	// SHA-256 rather than FNV: FNV's low bits barely move between tokens
	// that differ in their last digit, so one pod would win most terms.
	sum := sha256.Sum256([]byte(identity + "\x00" + strconv.FormatInt(token, 10)))
	return binary.BigEndian.Uint64(sum[:8])
}
