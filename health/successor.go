package health

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"slices"
	"strconv"
	"strings"
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

// TakeoverRank is this candidate's place (0 first) in the order in which
// the candidates try a Lease that no successor was named for
// (election.Config.TakeoverRank): its holder's claim ran out, or its
// release named none. The order is Successor's, extended to everyone:
// the candidates able to take over (fresh, healthy, last probe ok; this
// one too, the holder left out), the newest revision's first, then each
// older revision's, each by rank(identity, token). So the candidate a
// release would have named writes first, and the others a slot each
// later. -1 while this candidate's own entry is not known yet (it then
// backs off after lost races).
func (h *Health) TakeoverRank(holder string, token int64) int {
	own, ok := h.registry.own()
	if !ok {
		return -1
	}
	candidates := h.registry.successorCandidates()
	delete(candidates, holder)
	candidates[h.registry.identity] = own
	return slices.Index(takeoverOrder(candidates, token), h.registry.identity)
}

// takeoverOrder is TakeoverRank's order of candidates for the term of
// token.
func takeoverOrder(candidates map[string]entry, token int64) []string {
	arrived := revisionsArrived(candidates)
	ids := slices.Collect(maps.Keys(candidates))
	slices.SortFunc(ids, func(a, b string) int {
		ra, rb := candidates[a].Revision, candidates[b].Revision
		if c := cmp.Compare(arrived[rb], arrived[ra]); c != 0 {
			return c // the revision that arrived last first
		}
		if c := strings.Compare(rb, ra); c != 0 {
			return c // as newestRevision breaks ties
		}
		if c := cmp.Compare(rank(a, token), rank(b, token)); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	return ids
}

// revisionsArrived is, for each revision among entries, the earliest
// RevisionOrder of its entries: when it arrived.
func revisionsArrived(entries map[string]entry) map[string]int64 {
	first := map[string]int64{}
	for _, e := range entries {
		if o, ok := first[e.Revision]; !ok || e.RevisionOrder < o {
			first[e.Revision] = e.RevisionOrder
		}
	}
	return first
}

// newestRevision is the revision that arrived last among the entries: the
// one whose earliest RevisionOrder is the highest (a pod of an older
// revision that restarts takes a new order, but its revision keeps the
// older orders of its peers). Ties, which one writer at a time cannot
// make, go to the greater revision string, so every reader agrees.
func newestRevision(entries map[string]entry) string {
	newest, at := "", int64(-1)
	for rev, o := range revisionsArrived(entries) {
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
