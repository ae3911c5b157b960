package harness

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// fakeSidecar answers GET /leader with whatever the test sets.
type fakeSidecar struct {
	mu    sync.Mutex
	state api.Leader
}

func (f *fakeSidecar) set(s api.Leader) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = s
}

// fakeCandidate is a running Candidate whose API is a fakeSidecar: no
// process is started.
func fakeCandidate(t *testing.T, name string) (*Candidate, *fakeSidecar) {
	f := &fakeSidecar{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(f.state)
	}))
	t.Cleanup(srv.Close)
	c := &Candidate{name: name, apiURL: srv.URL, client: srv.Client(), done: make(chan struct{})}
	c.api = api.NewClient(srv.URL, srv.Client())
	return c, f
}

func TestGroupWaitLeader(t *testing.T) {
	ctx := context.Background()
	var g Group[*Candidate]
	a, fa := fakeCandidate(t, "a")
	b, fb := fakeCandidate(t, "b")
	g.Add(a)
	g.Add(b)

	fa.set(api.Leader{IsLeader: true, Holder: "a"})
	fb.set(api.Leader{Holder: "a"})
	if got, err := g.WaitLeader(ctx, time.Second); err != nil || got != a {
		t.Fatalf("WaitLeader = %s, %v; want a", nameOf(got), err)
	}
	if err := g.WaitFollowing(ctx, time.Second, a); err != nil {
		t.Errorf("WaitFollowing(a): %v", err)
	}
	if err := b.WaitFollowing(ctx, time.Second, "a"); err != nil {
		t.Errorf("b.WaitFollowing(a): %v", err)
	}

	// Two claiming at once is no single leader.
	fb.set(api.Leader{IsLeader: true, Holder: "b"})
	_, err := g.WaitLeader(ctx, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "no single leader") || !strings.Contains(err.Error(), "[a b]") {
		t.Errorf("WaitLeader with two leaders: %v, want no single leader naming both", err)
	}
	if got, err := g.WaitLeader(ctx, time.Second, a); err != nil || got != b {
		t.Errorf("WaitLeader excluding a = %s, %v; want b", nameOf(got), err)
	}
	if err := g.WaitFollowing(ctx, 300*time.Millisecond, a); err == nil || !strings.Contains(err.Error(), "[b]") {
		t.Errorf("WaitFollowing(a) while b leads: %v, want b named lagging", err)
	}

	// An exited member counts for nothing.
	close(a.done)
	if got, err := g.WaitLeader(ctx, time.Second); err != nil || got != b {
		t.Errorf("WaitLeader with a exited = %s, %v; want b", nameOf(got), err)
	}
	if live := g.Live(); len(live) != 1 || live[0] != b {
		t.Errorf("Live() = %s, want [b]", names(live))
	}
}

// nameOf names c for a failure message; a fake has no process to print.
func nameOf(c *Candidate) string {
	if c == nil {
		return "none"
	}
	return c.Name()
}
