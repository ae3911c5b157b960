package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// fakePartitions is a Partitions whose state the test sets.
type fakePartitions struct {
	mu      sync.Mutex
	state   ownership.State
	changed chan struct{}
	ready   error
	// releaseDeadline is the deadline the last Release was given; hang
	// makes Release fail as a hung API server would.
	releaseDeadline time.Time
	hang            bool
}

func newFakePartitions() *fakePartitions {
	valid := time.Date(2026, 11, 29, 8, 0, 10, 123456000, time.UTC)
	return &fakePartitions{
		changed: make(chan struct{}),
		state: ownership.State{
			Namespace: "default", Name: "work", Identity: "pod-a", Partitions: 4, LeaseDuration: 15 * time.Second, EffectivePartitions: 4, Members: 2, Member: true,
			FairShareMin: 2, FairShareMax: 2, Revision: 7,
			Owned: []ownership.Owned{
				{Partition: 1, FencingToken: 3, Since: valid.Add(-time.Minute), ValidUntil: valid},
				{Partition: 3, FencingToken: 12, Since: valid.Add(-time.Minute), ValidUntil: valid, Draining: true, DrainDeadline: time.Date(2026, 11, 29, 8, 0, 5, 0, time.UTC)},
			},
		},
	}
}

func (f *fakePartitions) Snapshot() ownership.State { s, _ := f.Watch(); return s }

func (f *fakePartitions) Watch() (ownership.State, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.changed
}

func (f *fakePartitions) set(change func(*ownership.State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.state)
	f.state.Revision++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakePartitions) ReleaseTerm(ctx context.Context, i int, _ int64) (ownership.State, error) {
	f.mu.Lock()
	f.releaseDeadline, _ = ctx.Deadline()
	hang := f.hang
	f.mu.Unlock()
	if hang {
		// As if the bound had run out while the API server hung.
		return f.Snapshot(), fmt.Errorf("clear lease: %w", context.DeadlineExceeded)
	}
	switch {
	case i < 0 || i >= 4:
		return f.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrOutOfRange, i)
	case i != 1 && i != 3:
		return f.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case i == 3:
		return f.Snapshot(), errors.New("API server unreachable")
	}
	f.set(func(s *ownership.State) { s.Owned = s.Owned[1:] })
	return f.Snapshot(), nil
}

// Checkpoint stores any checkpoint of partition 1 (except "too fast",
// rate-limited), refuses partition 3's as if its claim had expired.
func (f *fakePartitions) CheckpointTerm(_ context.Context, i int, _ int64, value string) (ownership.Checkpoint, error) {
	switch {
	case i < 0 || i >= 4:
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrOutOfRange, i)
	case len(value) > ownership.MaxCheckpointBytes:
		return ownership.Checkpoint{}, ownership.ErrCheckpointTooLarge
	case i != 1 && i != 3:
		return ownership.Checkpoint{}, fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	case i == 3:
		return ownership.Checkpoint{}, fmt.Errorf("%w: partition 3: %w", ownership.ErrCheckpointRefused, leadership.ErrClaimExpired)
	case value == "too fast":
		return ownership.Checkpoint{}, &ownership.RateLimitedError{Partition: i, RetryAfter: 1500 * time.Millisecond}
	}
	return ownership.Checkpoint{Value: value, Holder: "pod-a", FencingToken: 3, Time: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)}, nil
}

func (f *fakePartitions) Ready() error     { return f.ready }
func (f *fakePartitions) Candidate() error { return nil }
func (f *fakePartitions) Healthy() error   { return nil }

func TestPartitionsAPI(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		wantStatus         int
		wantBody           string
	}{
		{"state", http.MethodGet, "/partitions", http.StatusOK,
			`{"lease":{"namespace":"default","name":"work"},"identity":"pod-a","partitions":4,"leaseDurationSeconds":15,"effectivePartitions":4,"members":2,"member":true,"fairShare":{"min":2,"max":2},"owned":[{"partition":1,"fencingToken":3,"since":"2026-11-29T07:59:10.123456Z","validUntil":"2026-11-29T08:00:10.123456Z","validForMs":0,"draining":false},{"partition":3,"fencingToken":12,"since":"2026-11-29T07:59:10.123456Z","validUntil":"2026-11-29T08:00:10.123456Z","validForMs":0,"draining":true,"drainDeadline":"2026-11-29T08:00:05.000000Z"}],"revision":7,"degraded":false}`},
		{"release", http.MethodPost, "/partitions/1/release", http.StatusOK, `"owned":[{"partition":3,`},
		{"out of range", http.MethodPost, "/partitions/4/release", http.StatusNotFound, `{"error":"no such partition: 4`},
		{"not owned", http.MethodPost, "/partitions/2/release", http.StatusConflict, `{"error":"this pod does not own the partition: 2"}`},
		{"release write failed", http.MethodPost, "/partitions/3/release", http.StatusBadGateway, `could not clear its Lease`},
		{"not a number", http.MethodPost, "/partitions/x/release", http.StatusNotFound, `want a number`},
		{"trailing path", http.MethodPost, "/partitions/1/release/now", http.StatusNotFound, `no such path`},
		{"query on release", http.MethodPost, "/partitions/1/release?now=1", http.StatusBadRequest, `unknown query parameter \"now\" of POST /partitions/<i>/release (known: fencingToken)`},
		{"wrong method", http.MethodDelete, "/partitions", http.StatusMethodNotAllowed, `not allowed`},
		{"bad revision", http.MethodGet, "/partitions?wait=1s&revision=x", http.StatusBadRequest, `invalid revision`},
		{"leader is not served", http.MethodGet, "/leader", http.StatusNotFound, `partition mode`},
		{"the retired format is not served", http.MethodGet, "/", http.StatusNotFound, `partition mode`},
		{"unknown path", http.MethodGet, "/partition", http.StatusNotFound, `no such path`},
		{"checkpoint", http.MethodPut, "/partitions/1/checkpoint", http.StatusOK,
			`{"partition":1,"checkpoint":{"value":"offset=42","holder":"pod-a","fencingToken":3,"time":"2026-11-29T08:00:00.000000Z"}}`},
		{"checkpoint out of range", http.MethodPut, "/partitions/4/checkpoint", http.StatusNotFound, `no such partition: 4`},
		{"checkpoint not a number", http.MethodPut, "/partitions/01/checkpoint", http.StatusNotFound, `canonical decimal`},
		{"checkpoint not owned", http.MethodPut, "/partitions/2/checkpoint", http.StatusConflict, `"reason":"not-owned"`},
		{"checkpoint refused", http.MethodPut, "/partitions/3/checkpoint", http.StatusConflict, `"reason":"claim-expired"`},
		{"checkpoint by POST", http.MethodPost, "/partitions/1/checkpoint", http.StatusMethodNotAllowed, `allowed: PUT`},
		{"release by PUT", http.MethodPut, "/partitions/1/release", http.StatusMethodNotAllowed, `allowed: POST`},
		{"query on checkpoint", http.MethodPut, "/partitions/1/checkpoint?x=1", http.StatusBadRequest, `unknown query parameter \"x\" of PUT /partitions/<i>/checkpoint (known: fencingToken)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewPartitionsAPIHandler(newFakePartitions(), APIOptions{})
			rec := httptest.NewRecorder()
			var body io.Reader
			if tc.method == http.MethodPut {
				body = strings.NewReader("offset=42")
			}
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, body))
			if rec.Code != tc.wantStatus || !strings.Contains(rec.Body.String(), tc.wantBody) {
				t.Errorf("%s %s = %d %s, want %d containing %s", tc.method, tc.path, rec.Code, rec.Body, tc.wantStatus, tc.wantBody)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q", ct)
			}
		})
	}
}

func TestPartitionsLongPollAndEvents(t *testing.T) {
	f := newFakePartitions()
	srv := httptest.NewServer(NewPartitionsAPIHandler(f, APIOptions{KeepAlive: time.Hour}))
	defer srv.Close()

	answered := make(chan api.Partitions, 1)
	go func() {
		var r api.Partitions
		resp, err := http.Get(srv.URL + "/partitions?wait=10s&revision=7")
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&r)
			resp.Body.Close()
		}
		answered <- r
	}()
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 4096)
	n, _ := resp.Body.Read(buf)
	if first := string(buf[:n]); !strings.HasPrefix(first, "id: 7\nevent: partitions\ndata: {") {
		t.Errorf("first event %q", first)
	}
	f.set(func(s *ownership.State) { s.Members = 3 })
	select {
	case r := <-answered:
		if r.Revision != 8 || r.Members != 3 {
			t.Errorf("long-poll answered %+v, want revision 8 with 3 members", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the long-poll did not answer the change")
	}
	n, _ = io.ReadAtLeast(resp.Body, buf, 1)
	if next := string(buf[:n]); !strings.HasPrefix(next, "id: 8\nevent: partitions\n") {
		t.Errorf("next event %q", next)
	}
}

func TestPartitionsReadyz(t *testing.T) {
	f := newFakePartitions()
	for _, tc := range []struct {
		name       string
		mode       Readiness
		ready      error
		wantStatus int
		wantBody   string
	}{
		{"fair share", ReadyWhenLeader, nil, http.StatusOK, "ok\n"},
		{"below fair share", ReadyWhenLeader, errors.New("owns 0 partitions, below its fair share of 2"), http.StatusServiceUnavailable, "not ready: owns 0 partitions, below its fair share of 2\n"},
		{"candidate mode ignores the share", ReadyWhenCandidate, errors.New("below"), http.StatusOK, "ok\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.ready = tc.ready
			rec := httptest.NewRecorder()
			NewPartitionsProbeHandler(f, tc.mode, prometheus.NewRegistry()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			checkText(t, rec.Code, rec.Header(), rec.Body.String(), tc.wantStatus, tc.wantBody)
		})
	}
}

// TestPartitionsReleaseIsBounded: with a hung API server, POST
// /partitions/<i>/release answers 504 before the server's write timeout.
func TestPartitionsReleaseIsBounded(t *testing.T) {
	f := newFakePartitions()
	f.hang = true
	h := NewPartitionsAPIHandler(f, APIOptions{})
	req := httptest.NewRequest(http.MethodPost, "/partitions/1/release", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	if until := time.Until(f.releaseDeadline); f.releaseDeadline.IsZero() || until > releaseAnswerTimeout {
		t.Errorf("Release given deadline %v, want one within %v", f.releaseDeadline, releaseAnswerTimeout)
	}
	if w.Code != http.StatusGatewayTimeout {
		t.Errorf("status %d, want %d: %s", w.Code, http.StatusGatewayTimeout, w.Body)
	}
}

// TestPartitionsCheckpointLimits: a body over the limit is answered 413
// whether or not it declares its length, a rate-limited checkpoint 429 with
// Retry-After in whole seconds, rounded up; and a checkpoint is shown with
// its partition in GET /partitions.
func TestPartitionsCheckpointLimits(t *testing.T) {
	if ownership.MaxCheckpointBytes != api.MaxCheckpointBytes {
		t.Fatalf("ownership.MaxCheckpointBytes %d, api.MaxCheckpointBytes %d", ownership.MaxCheckpointBytes, api.MaxCheckpointBytes)
	}
	f := newFakePartitions()
	h := NewPartitionsAPIHandler(f, APIOptions{})
	put := func(body io.Reader) *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPut, "/partitions/1/checkpoint", body))
		return rec
	}
	limit := strings.Repeat("x", ownership.MaxCheckpointBytes)
	if rec := put(strings.NewReader(limit)); rec.Code != http.StatusOK {
		t.Errorf("a checkpoint of %d bytes: %d %s, want 200", len(limit), rec.Code, rec.Body)
	}
	if rec := put(strings.NewReader(limit + "x")); rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "at most 1024 bytes") {
		t.Errorf("a checkpoint of %d bytes: %d %s, want 413", len(limit)+1, rec.Code, rec.Body)
	}
	// No Content-Length: the body is read up to one byte past the limit.
	if rec := put(io.MultiReader(strings.NewReader(limit), strings.NewReader("xx"))); rec.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a streamed checkpoint over the limit: %d %s, want 413", rec.Code, rec.Body)
	}
	rec := put(strings.NewReader("too fast"))
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "2" {
		t.Errorf("rate-limited: %d Retry-After %q %s, want 429 with Retry-After 2", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}

	f.set(func(s *ownership.State) {
		s.Owned[0].Checkpoint = &ownership.Checkpoint{Value: "offset=7", Holder: "pod-b", FencingToken: 2, Time: time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)}
	})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/partitions", nil))
	if want := `"owned":[{"partition":1,"fencingToken":3,"since":"2026-11-29T07:59:10.123456Z","validUntil":"2026-11-29T08:00:10.123456Z","validForMs":0,"draining":false,"checkpoint":{"value":"offset=7","holder":"pod-b","fencingToken":2,"time":"2026-11-29T07:00:00.000000Z"}},{"partition":3,"fencingToken":12,`; !strings.Contains(rec.Body.String(), want) {
		t.Errorf("GET /partitions: %s, want %s", rec.Body, want)
	}
}
