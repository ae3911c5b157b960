package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// termElection leads in term 8 and releases only a term it leads in, as
// election.Elector.ReleaseTerm does.
type termElection struct {
	*fakeElection
	mu       sync.Mutex
	released []int64
}

func newTermElection() *termElection {
	s := leaderState()
	s.FencingToken = 8
	return &termElection{fakeElection: newFakeElection(s)}
}

func (f *termElection) ReleaseTerm(_ context.Context, token int64) (leadership.State, error) {
	s := f.Snapshot()
	switch {
	case !s.IsLeader:
		return s, leadership.ErrNotLeader
	case token != leadership.AnyTerm && token != s.FencingToken:
		return s, fmt.Errorf("%w (current %d, given %d)", leadership.ErrOtherTerm, s.FencingToken, token)
	}
	f.mu.Lock()
	f.released = append(f.released, s.FencingToken)
	f.mu.Unlock()
	return f.set(func(s *leadership.State) { s.IsLeader, s.Holder = false, "" }), nil
}

func (f *termElection) releases() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.released...)
}

// termPartitions owns partition 1 in term 5 (its earlier term was 3) and
// stores checkpoints and releases only in the term given, as
// partition.Member does.
type termPartitions struct {
	*fakePartitions
	mu       sync.Mutex
	stored   []ownership.Checkpoint
	released []int
}

func newTermPartitions() *termPartitions {
	f := &termPartitions{fakePartitions: newFakePartitions()}
	f.set(func(s *ownership.State) { s.Owned[0].FencingToken = 5 })
	return f
}

func (f *termPartitions) token(i int) (int64, bool) {
	for _, o := range f.Snapshot().Owned {
		if o.Partition == i {
			return o.FencingToken, true
		}
	}
	return 0, false
}

func (f *termPartitions) CheckpointTerm(_ context.Context, i int, token int64, value string) (ownership.Checkpoint, error) {
	current, ok := f.token(i)
	switch {
	case !ok:
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case token != leadership.AnyTerm && token != current:
		return ownership.Checkpoint{}, fmt.Errorf("%w: partition %d: %w (current %d, given %d)", ownership.ErrCheckpointRefused, i, leadership.ErrTermChanged, current, token)
	}
	c := ownership.Checkpoint{Value: value, Holder: "pod-a", FencingToken: current}
	f.mu.Lock()
	f.stored = append(f.stored, c)
	f.mu.Unlock()
	return c, nil
}

func (f *termPartitions) ReleaseTerm(_ context.Context, i int, token int64) (ownership.State, error) {
	current, ok := f.token(i)
	switch {
	case !ok:
		return f.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case token != leadership.AnyTerm && token != current:
		return f.Snapshot(), fmt.Errorf("%w: partition %d (current %d, given %d)", leadership.ErrOtherTerm, i, current, token)
	}
	f.mu.Lock()
	f.released = append(f.released, i)
	f.mu.Unlock()
	return f.Snapshot(), nil
}

func (f *termPartitions) record() ([]ownership.Checkpoint, []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]ownership.Checkpoint(nil), f.stored...), append([]int(nil), f.released...)
}

// checkTermChanged checks a 409 answer with reason term-changed.
func checkTermChanged(t *testing.T, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code != http.StatusConflict {
		t.Fatalf("status = %d %s, want 409 term-changed", w.Code, w.Body)
	}
	m := decodeJSON(t, w)
	if m["reason"] != api.ReasonTermChanged || m["error"] == "" || len(m) != 2 {
		t.Errorf("body %s, want an error with reason %q", w.Body, api.ReasonTermChanged)
	}
}

// TestCheckpointOfAnEarlierTerm: a worker left over from term 3 of
// partition 1, which this pod owns again in term 5, sends its checkpoint
// with its own token: it is refused, term-changed, and not stored; the
// current term's worker's checkpoint is stored.
func TestCheckpointOfAnEarlierTerm(t *testing.T) {
	f := newTermPartitions()
	h := NewPartitionsAPIHandler(f, APIOptions{})
	w := serve(h, httptest.NewRequest(http.MethodPut, "/partitions/1/checkpoint?fencingToken=3", strings.NewReader("offset=1042")))
	checkTermChanged(t, w)
	if stored, _ := f.record(); len(stored) != 0 {
		t.Fatalf("the stale checkpoint was stored: %+v", stored)
	}
	w = serve(h, httptest.NewRequest(http.MethodPut, "/partitions/1/checkpoint?fencingToken=5", strings.NewReader("offset=2000")))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"value":"offset=2000","holder":"pod-a","fencingToken":5`) {
		t.Fatalf("the current term's checkpoint: %d %s", w.Code, w.Body)
	}
	if stored, _ := f.record(); len(stored) != 1 || stored[0].Value != "offset=2000" {
		t.Fatalf("stored %+v, want only offset=2000", stored)
	}
}

// TestReleaseOfAnEarlierTerm: a stale POST /partitions/1/release (term 3)
// and a stale POST /release (term 7) are answered 409 term-changed, and
// the current terms go on; with the current token they release.
func TestReleaseOfAnEarlierTerm(t *testing.T) {
	p := newTermPartitions()
	ph := NewPartitionsAPIHandler(p, APIOptions{})
	checkTermChanged(t, serve(ph, httptest.NewRequest(http.MethodPost, "/partitions/1/release?fencingToken=3", nil)))
	if _, released := p.record(); len(released) != 0 {
		t.Fatalf("the stale release released partitions %v", released)
	}
	if w := serve(ph, httptest.NewRequest(http.MethodPost, "/partitions/1/release?fencingToken=5", nil)); w.Code != http.StatusOK {
		t.Fatalf("releasing the current term: %d %s", w.Code, w.Body)
	}
	if _, released := p.record(); len(released) != 1 {
		t.Fatalf("released %v, want partition 1 once", released)
	}

	el := newTermElection()
	h := NewAPIHandler(el, APIOptions{})
	checkTermChanged(t, serve(h, newRequest(t, http.MethodPost, "/release?fencingToken=7")))
	if got := el.releases(); len(got) != 0 || !el.Snapshot().IsLeader {
		t.Fatalf("the stale release ended the current term: released %v, leading %v", got, el.Snapshot().IsLeader)
	}
	w := serve(h, newRequest(t, http.MethodPost, "/release?fencingToken=8"))
	if m := decodeJSON(t, w); w.Code != http.StatusOK || m["released"] != true {
		t.Fatalf("releasing the current term: %d %s", w.Code, w.Body)
	}
	// A pod that does not lead releases nothing, whatever the token: as
	// without one.
	w = serve(h, newRequest(t, http.MethodPost, "/release?fencingToken=3"))
	if m := decodeJSON(t, w); w.Code != http.StatusOK || m["released"] != false {
		t.Fatalf("a follower's release: %d %s", w.Code, w.Body)
	}
}

// TestAcquireAfterTerm: POST /acquire?fencingToken=N campaigns only once
// term N is over as the sidecar sees it (a later term, or term N with no
// holder), and otherwise answers 409 term-current without an attempt.
func TestAcquireAfterTerm(t *testing.T) {
	released := followerState()
	released.Holder = ""
	for _, tc := range []struct {
		name   string
		state  leadership.State
		target string
		// want is the status; campaigns whether Acquire is called.
		want      int
		campaigns bool
	}{
		{"another pod holds term 7", followerState(), "/acquire?fencingToken=7", http.StatusConflict, false},
		{"this pod leads in term 7", leaderState(), "/acquire?fencingToken=7&wait=30s", http.StatusConflict, false},
		{"term 7 was released", released, "/acquire?fencingToken=7", http.StatusOK, true},
		{"term 6 is over", followerState(), "/acquire?fencingToken=6&retries=2", http.StatusOK, true},
		{"term 8 is not known", followerState(), "/acquire?fencingToken=8", http.StatusConflict, false},
		{"not canonical", followerState(), "/acquire?fencingToken=+6", http.StatusBadRequest, false},
		{"beyond int32", followerState(), "/acquire?fencingToken=2147483648", http.StatusBadRequest, false},
		{"given twice", followerState(), "/acquire?fencingToken=6&fencingToken=6", http.StatusBadRequest, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el := newFakeElection(tc.state)
			called := false
			el.acquire = func(context.Context, leadership.AcquireOptions) (leadership.State, bool, error) {
				called = true
				return leaderState(), true, nil
			}
			w := serve(NewAPIHandler(el, APIOptions{}), newRequest(t, http.MethodPost, tc.target))
			if w.Code != tc.want || called != tc.campaigns {
				t.Fatalf("POST %s = %d %s (campaigned: %v), want %d (campaigns: %v)", tc.target, w.Code, w.Body, called, tc.want, tc.campaigns)
			}
			if m := decodeJSON(t, w); w.Code == http.StatusConflict && m["reason"] != api.ReasonTermCurrent {
				t.Errorf("reason %v, want %s", m["reason"], api.ReasonTermCurrent)
			}
		})
	}
}

// TestTermQuery: ?fencingToken= is a canonical decimal int32, given once;
// anything else is a 400 with one line, and nothing is done.
func TestTermQuery(t *testing.T) {
	for _, q := range []string{"fencingToken=", "fencingToken=-1", "fencingToken=05", "fencingToken=%2B5", "fencingToken=5.0", "fencingToken=0x5",
		"fencingToken=2147483648", "fencingToken=99999999999999999999", "fencingToken=5&fencingToken=5", "fencingToken=5&x=1", "token=5"} {
		p := newTermPartitions()
		ph := NewPartitionsAPIHandler(p, APIOptions{})
		el := newTermElection()
		h := NewAPIHandler(el, APIOptions{})
		for _, w := range []*httptest.ResponseRecorder{
			serve(ph, httptest.NewRequest(http.MethodPut, "/partitions/1/checkpoint?"+q, strings.NewReader("x"))),
			serve(ph, httptest.NewRequest(http.MethodPost, "/partitions/1/release?"+q, nil)),
			serve(h, newRequest(t, http.MethodPost, "/release?"+q)),
		} {
			if msg := checkJSONError(t, w, http.StatusBadRequest); strings.Contains(msg, "\n") {
				t.Errorf("?%s: a message of more than one line: %q", q, msg)
			}
		}
		if stored, released := p.record(); len(stored)+len(released)+len(el.releases()) != 0 {
			t.Errorf("?%s: something was done", q)
		}
	}
	for _, q := range []string{"fencingToken=0", "fencingToken=2147483647"} {
		if _, err := parseTerm(mustQuery(t, q), "test"); err != nil {
			t.Errorf("?%s: %v", q, err)
		}
	}
}

func mustQuery(t *testing.T, raw string) map[string][]string {
	t.Helper()
	v, err := url.ParseQuery(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
