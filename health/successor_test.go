package health

import (
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// rolloutEntries are two pods of an old revision and, arrived after them,
// two of a new one.
func rolloutEntries() map[string]entry {
	return map[string]entry{
		"old-1": {Revision: "aaa", RevisionOrder: 1},
		"old-2": {Revision: "aaa", RevisionOrder: 2},
		"new-1": {Revision: "zzz", RevisionOrder: 5},
		"new-2": {Revision: "zzz", RevisionOrder: 6},
	}
}

// TestPickSuccessorNewestRevision: only candidates of the revision that
// arrived last are named, whatever their hash rank; among them the pick is
// the same for every reader and moves with the term.
func TestPickSuccessorNewestRevision(t *testing.T) {
	candidates := rolloutEntries()
	// An old pod that restarted after the rollout began: a new order, an
	// old revision.
	candidates["old-3"] = entry{Revision: "aaa", RevisionOrder: 9}
	candidates["new-3"] = entry{Revision: "zzz", RevisionOrder: 7}
	picked := map[string]bool{}
	for token := range int64(64) {
		got := pickSuccessor(candidates, token)
		if candidates[got].Revision != "zzz" {
			t.Fatalf("token %d: picked %q of revision %q, want the newest revision zzz", token, got, candidates[got].Revision)
		}
		if again := pickSuccessor(candidates, token); again != got {
			t.Fatalf("token %d: picked %q, then %q", token, got, again)
		}
		picked[got] = true
	}
	if len(picked) != 3 {
		t.Errorf("over 64 terms the pick fell on %v, want each of the 3 new pods at times", picked)
	}
	if got := pickSuccessor(nil, 1); got != "" {
		t.Errorf("no candidate: picked %q", got)
	}
}

// TestRevisionOrder: an entry keeps its order while its revision stays, a
// new or changed revision goes above every entry, an unknown one has none.
func TestRevisionOrder(t *testing.T) {
	m := map[string]entry{"a": {Revision: "r1", RevisionOrder: 3}, "b": {Revision: "r2", RevisionOrder: 4}}
	for _, tc := range []struct {
		id, rev string
		want    int64
	}{
		{"a", "r1", 3}, {"a", "r2", 5}, {"c", "r2", 5}, {"c", "", 0},
	} {
		if got := revisionOrder(m, tc.id, tc.rev); got != tc.want {
			t.Errorf("revisionOrder(%s, %q) = %d, want %d", tc.id, tc.rev, got, tc.want)
		}
	}
}

// TestSuccessorOnlyHealthy: Successor names a candidate whose app is
// healthy and whose last probe passed, never an unhealthy one, one whose
// probe just failed, or itself.
func TestSuccessorOnlyHealthy(t *testing.T) {
	h := &Health{registry: newRegistry("ns", "app-candidates", "self", 10*time.Second, nil, nil, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil)}
	h.registry.observe(candidatesLease(`{"failing":{"healthy":true,"ok":false,"seq":1},"sick":{"healthy":false,"ok":false,"seq":1},"well":{"healthy":true,"ok":true,"seq":1},"self":{"healthy":true,"ok":true,"seq":1}}`))
	for token := range int64(16) {
		if got := h.Successor(token); got != "well" {
			t.Fatalf("Successor(%d) = %q, want well", token, got)
		}
	}
	h.registry.observe(candidatesLease(`{"sick":{"healthy":false,"ok":false,"seq":2},"well":{"healthy":true,"ok":false,"seq":2},"self":{"healthy":true,"ok":true,"seq":2}}`))
	if got := h.Successor(1); got != "" {
		t.Fatalf("Successor = %q after every other probe failed, want none", got)
	}
}

// TestTakeoverOrder: the newest revision's candidates first, then each
// older revision's in the order they arrived; within one, by hash rank;
// every reader gets the same order; its first among the others is the
// successor a release would have named.
func TestTakeoverOrder(t *testing.T) {
	candidates := rolloutEntries()
	candidates["mid-1"] = entry{Revision: "mmm", RevisionOrder: 3}
	revisions := map[string]int{"zzz": 0, "mmm": 1, "aaa": 2}
	firsts := map[string]bool{}
	for token := range int64(64) {
		order := takeoverOrder(candidates, token)
		if len(order) != len(candidates) {
			t.Fatalf("token %d: order %v, want all %d candidates", token, order, len(candidates))
		}
		for i := 1; i < len(order); i++ {
			if revisions[candidates[order[i-1]].Revision] > revisions[candidates[order[i]].Revision] {
				t.Fatalf("token %d: order %v puts an older revision before a newer one", token, order)
			}
		}
		if again := takeoverOrder(candidates, token); !slices.Equal(again, order) {
			t.Fatalf("token %d: order %v, then %v", token, order, again)
		}
		if got := pickSuccessor(candidates, token); got != order[0] {
			t.Fatalf("token %d: first in the order %q, but the successor picked %q", token, order[0], got)
		}
		firsts[order[0]] = true
	}
	if len(firsts) != 2 {
		t.Errorf("over 64 terms the first place fell on %v, want each new pod at times", firsts)
	}
}

// TestTakeoverRank: this candidate's place among the candidates able to
// take over, the holder left out; none before its own entry is known.
func TestTakeoverRank(t *testing.T) {
	h := &Health{registry: newRegistry("ns", "app-candidates", "self", 10*time.Second, nil, nil, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil)}
	if got := h.TakeoverRank("dead", 1); got != -1 {
		t.Fatalf("TakeoverRank before its own entry was read = %d, want -1", got)
	}
	h.registry.observe(candidatesLease(`{"dead":{"healthy":true,"ok":true,"seq":1},"sick":{"healthy":false,"ok":false,"seq":1},"well":{"healthy":true,"ok":true,"seq":1},"self":{"healthy":true,"ok":true,"seq":1}}`))
	h.registry.observe(candidatesLease(`{"dead":{"healthy":true,"ok":true,"seq":2},"sick":{"healthy":false,"ok":false,"seq":2},"well":{"healthy":true,"ok":true,"seq":2},"self":{"healthy":true,"ok":true,"seq":2}}`))
	places := map[int]bool{}
	for token := range int64(32) {
		got := h.TakeoverRank("dead", token)
		// Two able to take over: self and well (dead holds, sick is not).
		want := slices.Index(takeoverOrder(map[string]entry{"self": {}, "well": {}}, token), "self")
		if got != want {
			t.Fatalf("TakeoverRank(dead, %d) = %d, want %d", token, got, want)
		}
		places[got] = true
	}
	if !places[0] || !places[1] {
		t.Errorf("over 32 terms self's places were %v, want both 0 and 1", places)
	}
}
