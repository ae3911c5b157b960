package httpapi

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/api/apitest"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// The drift tests build the same states in the real handler (over a fake
// Election or Partitions) and in apitest's fake sidecar, and compare what
// both write byte for byte: answers, error answers and SSE events. Both
// read the same fixed clock, so even validForMs and the times are the
// same and nothing is stripped. A renamed JSON field, a changed error
// message or status on either side fails them.

// driftNow is the clock both sides read.
var driftNow = time.Date(2026, 11, 29, 8, 0, 0, 123456000, time.UTC)

// answer is what a request got, as the drift tests compare it.
type answer struct {
	status            int
	contentType, body string
	allow             string
}

func realAnswer(t *testing.T, h http.Handler, method, target, body string) answer {
	t.Helper()
	r := newRequest(t, method, target)
	if body != "" {
		r.Body, r.ContentLength = io.NopCloser(strings.NewReader(body)), int64(len(body))
	}
	w := serve(h, r)
	return answer{w.Code, w.Header().Get("Content-Type"), w.Body.String(), w.Header().Get("Allow")}
}

func fakeAnswer(t *testing.T, s *apitest.Sidecar, method, target, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("Content-Type"), string(b), resp.Header.Get("Allow")}
}

// compare asks both sides method target and fails if the answers differ.
func compare(t *testing.T, h http.Handler, s *apitest.Sidecar, method, target, body string) {
	t.Helper()
	real, fake := realAnswer(t, h, method, target, body), fakeAnswer(t, s, method, target, body)
	if real != fake {
		t.Errorf("%s %s:\nsidecar: %+v\napitest: %+v", method, target, real, fake)
	}
}

// chunkReader reads an event stream one event at a time, keep-alive
// comments skipped.
type chunkReader struct{ br *bufio.Reader }

func (r chunkReader) next(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream: %v", err)
		}
		if line == "\n" && b.Len() > 0 {
			return b.String()
		}
		if line != "\n" && !strings.HasPrefix(line, ":") {
			b.WriteString(line)
		}
	}
}

// streams opens GET /events on both sides.
func streams(t *testing.T, h http.Handler, s *apitest.Sidecar) (real, fake chunkReader) {
	t.Helper()
	resp, _ := newSSEServer(t, h).connect(t, "drift")
	fresp, err := http.Get(s.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fresp.Body.Close() })
	return chunkReader{bufio.NewReader(resp.Body)}, chunkReader{bufio.NewReader(fresp.Body)}
}

// compareEvents reads n events from both streams and compares them.
func compareEvents(t *testing.T, step string, real, fake chunkReader, n int) {
	t.Helper()
	for range n {
		if r, f := real.next(t), fake.next(t); r != f {
			t.Errorf("%s, GET /events:\nsidecar: %q\napitest: %q", step, r, f)
		}
	}
}

// driftElection is a fakeElection whose release checks the term as the
// elector does.
type driftElection struct{ *fakeElection }

func (d driftElection) ReleaseTerm(_ context.Context, token int64) (leadership.State, error) {
	s := d.Snapshot()
	switch {
	case !s.IsLeader:
		return s, leadership.ErrNotLeader
	case token != leadership.AnyTerm && token != s.FencingToken:
		return s, fmt.Errorf("%w (current %d, given %d)", leadership.ErrOtherTerm, s.FencingToken, token)
	}
	return d.set(func(s *leadership.State) {
		s.Holder, s.IsLeader, s.LeaderSince, s.ValidUntil, s.Deadline, s.Successor = "", false, time.Time{}, time.Time{}, time.Time{}, ""
		s.LastChange = leadership.Change{Reason: leadership.ReasonReleased, At: driftNow, FencingToken: s.FencingToken}
		s.LastLost = s.LastChange
	}), nil
}

func TestApitestSpeaksTheLeaderAPI(t *testing.T) {
	el := driftElection{newFakeElection(leadership.State{Namespace: "default", Name: "my-app", Identity: "my-app-0", LeaseDurationSeconds: 15, Revision: 1})}
	h := NewAPIHandler(el, APIOptions{Clock: clocktesting.NewFakePassiveClock(driftNow)})
	s := apitest.New(t, apitest.Config{Now: func() time.Time { return driftNow }})
	real, fake := streams(t, h, s)
	compareEvents(t, "at start", real, fake, 1)

	type step struct {
		name   string
		fake   func()
		real   func(*leadership.State)
		events int
	}
	lost := func(r leadership.Reason) leadership.Change {
		return leadership.Change{Reason: r, At: driftNow, FencingToken: 7}
	}
	for _, st := range []step{
		// A leader shows its successor; a follower none (apitest keeps it
		// for the next term, the sidecar looks it up for the leader only).
		{"lead", func() { s.SetSuccessor("my-app-2"); s.Lead(7, 10*time.Second) }, func(e *leadership.State) {
			e.Holder, e.IsLeader, e.FencingToken, e.RenewTime, e.LeaderSince = "my-app-0", true, 7, driftNow, driftNow
			e.Successor = "my-app-2"
			e.ValidUntil = driftNow.Add(10 * time.Second)
			e.Deadline = e.ValidUntil
			e.LastChange = leadership.Change{Leader: true, Reason: leadership.ReasonAcquired, At: driftNow, FencingToken: 7}
		}, 1},
		{"degraded", func() { s.SetDegraded(`app <unhealthy> & "slow"`) }, func(e *leadership.State) { e.Degraded = `app <unhealthy> & "slow"` }, 1},
		{"renew-deadline", func() { s.Lose(api.ChangeRenewDeadline) }, func(e *leadership.State) {
			e.IsLeader, e.LeaderSince, e.ValidUntil, e.Deadline, e.Successor = false, time.Time{}, time.Time{}, time.Time{}, ""
			e.LastChange, e.LastLost = lost(leadership.ReasonRenewDeadline), lost(leadership.ReasonRenewDeadline)
		}, 2},
		{"another holder", func() { s.SetHolder("my-app-1", 8) }, func(e *leadership.State) { e.Holder, e.FencingToken = "my-app-1", 8 }, 1},
		{"no holder", func() { s.SetHolder("", 8) }, func(e *leadership.State) { e.Holder = "" }, 1},
		{"lead again", func() { s.Lead(9, 10*time.Second) }, func(e *leadership.State) {
			e.Holder, e.IsLeader, e.FencingToken, e.LeaderSince = "my-app-0", true, 9, driftNow
			e.Successor = "my-app-2"
			e.ValidUntil = driftNow.Add(10 * time.Second)
			e.Deadline = e.ValidUntil
			e.LastChange = leadership.Change{Leader: true, Reason: leadership.ReasonAcquired, At: driftNow, FencingToken: 9}
		}, 1},
	} {
		st.fake()
		el.set(st.real)
		compareEvents(t, st.name, real, fake, st.events)
		for _, target := range []string{"/leader", "/leader?wait=0s&revision=1"} {
			compare(t, h, s, http.MethodGet, target, "")
		}
		if st.name != "no holder" { // there the fake Election would not campaign; apitest does
			compare(t, h, s, http.MethodPost, "/acquire?fencingToken=8", "") // 409 term-current, or acquired at once
		}
	}
	// The term-scoped release: refused for another term, then done.
	for _, target := range []string{"/release?fencingToken=8", "/release?fencingToken=x", "/release?wait=1s", "/release?fencingToken=9", "/release"} {
		compare(t, h, s, http.MethodPost, target, "")
	}
	compareEvents(t, "released", real, fake, 2)
}

func TestApitestSpeaksTheErrors(t *testing.T) {
	h := NewAPIHandler(newFakeElection(leadership.State{Namespace: "default", Name: "my-app", Identity: "my-app-0", LeaseDurationSeconds: 15, Revision: 1}), APIOptions{})
	s := apitest.New(t, apitest.Config{})
	for _, c := range []struct{ method, target string }{
		{http.MethodGet, "/nope"},
		{http.MethodGet, "/leader/x"},
		{http.MethodDelete, "/leader"},
		{http.MethodGet, "/release"},
		{http.MethodGet, "/leader?wait=10m"},
		{http.MethodGet, "/leader?wait=-1s"},
		{http.MethodGet, "/leader?wait=x"},
		{http.MethodGet, "/leader?revision=-1"},
		{http.MethodGet, "/leader?since=1"},
		{http.MethodGet, "/leader?wait=1s&wait=2s"},
		{http.MethodGet, "/leader?%zz"},
		{http.MethodGet, "/events?x=1"},
		{http.MethodPost, "/acquire?wait=10m"},
		{http.MethodPost, "/acquire?wait=1s&retries=2"},
		{http.MethodPost, "/acquire?retries=0"},
		{http.MethodPost, "/acquire?retryDelay=2m"},
		{http.MethodPost, "/acquire?retries=100&retryDelay=1m"},
		{http.MethodPost, "/acquire?fencingToken=05"},
		{http.MethodPost, "/acquire?x=1"},
		{http.MethodPost, "/release?fencingToken=" + strings.Repeat("9", 40)},
	} {
		compare(t, h, s, c.method, c.target, "")
	}
}

// driftPartitions is a partition member as far as the handler sees it,
// with the member's errors; the test sets its state.
type driftPartitions struct{ *fakePartitions }

func (d *driftPartitions) owned(i int) (ownership.Owned, bool) {
	for _, o := range d.Snapshot().Owned {
		if o.Partition == i {
			return o, true
		}
	}
	return ownership.Owned{}, false
}

func (d *driftPartitions) ReleaseTerm(_ context.Context, i int, token int64) (ownership.State, error) {
	o, ok := d.owned(i)
	switch {
	case i >= d.Snapshot().Partitions:
		return d.Snapshot(), fmt.Errorf("%w: %d (the group has partitions 0..%d)", ownership.ErrOutOfRange, i, d.Snapshot().Partitions-1)
	case !ok:
		return d.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case token != leadership.AnyTerm && token != o.FencingToken:
		return d.Snapshot(), fmt.Errorf("partition %d: %w (current %d, given %d)", i, leadership.ErrOtherTerm, o.FencingToken, token)
	}
	d.set(func(s *ownership.State) {
		var kept []ownership.Owned
		for _, o := range s.Owned {
			if o.Partition != i {
				kept = append(kept, o)
			}
		}
		s.Owned = kept
	})
	return d.Snapshot(), nil
}

func (d *driftPartitions) CheckpointTerm(_ context.Context, i int, token int64, value string) (ownership.Checkpoint, error) {
	o, ok := d.owned(i)
	switch {
	case i >= d.Snapshot().Partitions:
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d (the group has partitions 0..%d)", ownership.ErrOutOfRange, i, d.Snapshot().Partitions-1)
	case !utf8.ValidString(value):
		return ownership.Checkpoint{}, ownership.ErrCheckpointNotText
	case !ok:
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case token != leadership.AnyTerm && token != o.FencingToken:
		return ownership.Checkpoint{}, fmt.Errorf("%w: partition %d: %w (current %d, given %d)", ownership.ErrCheckpointRefused, i, leadership.ErrTermChanged, o.FencingToken, token)
	}
	c := ownership.Checkpoint{Value: value, Holder: d.Snapshot().Identity, FencingToken: o.FencingToken, Time: driftNow}
	// Stored with the partition's Lease: no new revision.
	d.mu.Lock()
	defer d.mu.Unlock()
	owned := append([]ownership.Owned(nil), d.state.Owned...)
	for k := range owned {
		if owned[k].Partition == i {
			owned[k].Checkpoint = &c
		}
	}
	d.state.Owned = owned
	return c, nil
}

func TestApitestSpeaksThePartitionsAPI(t *testing.T) {
	f := newFakePartitions()
	f.state = ownership.State{Namespace: "default", Name: "my-app", Identity: "my-app-0", Partitions: 4, LeaseDuration: 15 * time.Second, EffectivePartitions: 4, Members: 1, Member: true, FairShareMin: 4, FairShareMax: 4, Revision: 1}
	d := &driftPartitions{fakePartitions: f}
	h := NewPartitionsAPIHandler(d, APIOptions{Clock: clocktesting.NewFakePassiveClock(driftNow)})
	s := apitest.New(t, apitest.Config{Partitions: 4, Now: func() time.Time { return driftNow }})
	real, fake := streams(t, h, s)
	compareEvents(t, "at start", real, fake, 1)

	s.SetCheckpoint(1, "offset=40", "my-app-1", 2) // stored with the Lease: no event
	earlier := &ownership.Checkpoint{Value: "offset=40", Holder: "my-app-1", FencingToken: 2, Time: driftNow}
	for _, st := range []struct {
		name string
		fake func()
		real func(*ownership.State)
	}{
		{"own 1", func() { s.Own(1, 3, 10*time.Second) }, func(p *ownership.State) {
			p.Owned = []ownership.Owned{{Partition: 1, FencingToken: 3, Since: driftNow, ValidUntil: driftNow.Add(10 * time.Second), RenewTime: driftNow, Deadline: driftNow.Add(10 * time.Second), Checkpoint: earlier}}
		}},
		{"own 3", func() { s.Own(3, 12, 10*time.Second) }, func(p *ownership.State) {
			p.Owned = append(p.Owned, ownership.Owned{Partition: 3, FencingToken: 12, Since: driftNow, ValidUntil: driftNow.Add(10 * time.Second), RenewTime: driftNow, Deadline: driftNow.Add(10 * time.Second)})
		}},
		{"drain 3", func() { s.Drain(3, 5*time.Second) }, func(p *ownership.State) {
			p.Owned = append([]ownership.Owned(nil), p.Owned...)
			p.Owned[1].Draining, p.Owned[1].DrainDeadline = true, driftNow.Add(5*time.Second)
		}},
		{"members", func() { s.SetMembers(3) }, func(p *ownership.State) { p.Members, p.FairShareMin, p.FairShareMax = 3, 1, 2 }},
	} {
		st.fake()
		f.set(st.real)
		compareEvents(t, st.name, real, fake, 1)
	}
	compare(t, h, s, http.MethodGet, "/partitions", "")
	compare(t, h, s, http.MethodGet, "/partitions?wait=0s", "")
	for _, c := range []struct{ method, target, body string }{
		{http.MethodPut, "/partitions/1/checkpoint?fencingToken=3", "offset=41"},
		{http.MethodPut, "/partitions/1/checkpoint?fencingToken=2", "stale"},
		{http.MethodPut, "/partitions/2/checkpoint", "x"},
		{http.MethodPut, "/partitions/9/checkpoint", "x"},
		{http.MethodPut, "/partitions/01/checkpoint", "x"},
		{http.MethodPut, "/partitions/1/checkpoint", strings.Repeat("x", api.MaxCheckpointBytes+1)},
		{http.MethodPut, "/partitions/1/checkpoint", "\xff"},
		{http.MethodPost, "/partitions/1/checkpoint", ""},
		{http.MethodPut, "/partitions/1/stop", ""},
		{http.MethodPost, "/partitions/2/release", ""},
		{http.MethodPost, "/partitions/9/release", ""},
		{http.MethodPost, "/partitions/3/release?fencingToken=11", ""},
		{http.MethodPost, "/partitions/3/release?wait=1s", ""},
		{http.MethodGet, "/leader", ""},
		{http.MethodPost, "/release", ""},
		{http.MethodGet, "/partitions?wait=1h", ""},
	} {
		compare(t, h, s, c.method, c.target, c.body)
	}
	// The release changes both: the answer is the state after it.
	compare(t, h, s, http.MethodPost, "/partitions/3/release?fencingToken=12", "")
	compareEvents(t, "released", real, fake, 1)
}
