package apitest

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

func apiError(t *testing.T, err error, status int, reason string) {
	t.Helper()
	var e *api.Error
	if !errors.As(err, &e) || e.StatusCode != status || e.Reason != reason {
		t.Fatalf("err = %v, want %d with reason %q", err, status, reason)
	}
}

func TestLeadReleaseAndCalls(t *testing.T) {
	s := New(t, Config{})
	c, ctx := s.Client(), context.Background()
	if l, err := c.Leader(ctx); err != nil || l.IsLeader || l.Holder != "" || l.ValidForMs != nil {
		t.Fatalf("at start: %+v, %v", l, err)
	}
	s.Lead(7, time.Minute)
	l, err := c.Leader(ctx)
	if err != nil || !l.IsLeader || l.FencingToken != 7 || l.Holder != "my-app-0" || l.ValidForMs == nil || *l.ValidForMs <= 0 || l.LastChange.Reason != api.ChangeAcquired {
		t.Fatalf("leading: %+v, %v", l, err)
	}
	rev := l.Revision
	s.Lead(7, time.Hour) // a renewal: no new revision
	if l, _ := c.Leader(ctx); l.Revision != rev || !l.ValidUntil.After(time.Now().Add(59*time.Minute)) {
		t.Errorf("after a renewal: revision %d (was %d), validUntil %v", l.Revision, rev, l.ValidUntil)
	}
	_, err = c.ReleaseTerm(ctx, 6)
	apiError(t, err, http.StatusConflict, api.ReasonTermChanged)
	r, err := c.ReleaseTerm(ctx, 7)
	if err != nil || !r.Released || r.IsLeader || r.Holder != "" || r.LastChange.Reason != api.ChangeReleased {
		t.Fatalf("release: %+v, %v", r, err)
	}
	if r, err := c.Release(ctx); err != nil || r.Released {
		t.Errorf("a second release: %+v, %v; want released false", r, err)
	}
	releases := s.CallsTo(http.MethodPost, "/release")
	if len(releases) != 3 || releases[0].Status != http.StatusConflict || releases[1].Query.Get("fencingToken") != "7" || releases[2].Status != http.StatusOK {
		t.Errorf("recorded releases: %+v", releases)
	}
}

func TestAcquire(t *testing.T) {
	s := New(t, Config{})
	c, ctx := s.Client(), context.Background()
	s.SetHolder("my-app-1", 3)
	if a, err := c.Acquire(ctx); err != nil || a.Acquired || a.Holder != "my-app-1" {
		t.Fatalf("acquire while another pod leads: %+v, %v", a, err)
	}
	_, err := c.AcquireAfterTerm(ctx, 3, 0)
	apiError(t, err, http.StatusConflict, api.ReasonTermCurrent)
	// The other pod releases once the blocking acquire (the third) has
	// arrived, not after a guessed delay.
	go func() {
		for len(s.CallsTo(http.MethodPost, "/acquire")) < 3 {
			time.Sleep(time.Millisecond)
		}
		s.SetHolder("", 0)
	}()
	a, err := c.AcquireAfterTerm(ctx, 2, 10*time.Second)
	if err != nil || !a.Acquired || a.FencingToken != 4 || !a.IsLeader {
		t.Fatalf("blocking acquire: %+v, %v", a, err)
	}
	_, err = New(t, Config{Observer: true}).Client().Acquire(ctx)
	apiError(t, err, http.StatusConflict, "")
}

func TestClaimRunsOut(t *testing.T) {
	s := New(t, Config{})
	c, ctx := s.Client(), context.Background()
	s.Lead(1, 100*time.Millisecond)
	l, err := c.WaitLeader(ctx, s.Leader().Revision, 10*time.Second)
	if err != nil || l.IsLeader || l.LastChange.Reason != api.ChangeRenewDeadline || l.Holder != "my-app-0" {
		t.Fatalf("after validUntil: %+v, %v", l, err)
	}
}

func TestEventsAndLost(t *testing.T) {
	s := New(t, Config{})
	s.Lead(5, time.Minute)
	resp, err := http.Get(s.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	next := func() string {
		var b strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if line == "\n" {
				return b.String()
			}
			b.WriteString(line)
		}
	}
	if e := next(); !strings.Contains(e, "event: leader\n") || !strings.Contains(e, `"isLeader":true`) {
		t.Fatalf("first event: %q", e)
	}
	s.SetHolder("my-app-1", 6)
	if e := next(); e != `event: lost`+"\n"+`data: {"reason":"taken-over","at":"`+s.Leader().LastChange.At.UTC().Format(api.TimeFormat)+`","fencingToken":5,"holder":"my-app-1"}`+"\n" {
		t.Errorf("lost event: %q", e)
	}
	if e := next(); !strings.Contains(e, `"holder":"my-app-1","isLeader":false,"fencingToken":6`) {
		t.Errorf("state after the lost event: %q", e)
	}
}

func TestPartitionCalls(t *testing.T) {
	s := New(t, Config{Partitions: 2})
	c, ctx := s.Client(), context.Background()
	_, err := c.CheckpointTerm(ctx, 1, 1, "x")
	apiError(t, err, http.StatusConflict, api.ReasonNotOwned)
	_, err = c.Checkpoint(ctx, 2, "x")
	apiError(t, err, http.StatusNotFound, "")
	s.Own(1, 3, time.Minute)
	_, err = c.Checkpoint(ctx, 1, strings.Repeat("x", api.MaxCheckpointBytes+1))
	apiError(t, err, http.StatusRequestEntityTooLarge, "")
	_, err = c.ReleasePartitionTerm(ctx, 1, 2)
	apiError(t, err, http.StatusConflict, api.ReasonTermChanged)
	p, err := c.ReleasePartitionTerm(ctx, 1, 3)
	if err != nil || len(p.Owned) != 0 {
		t.Fatalf("release: %+v, %v", p, err)
	}
	_, err = c.Leader(ctx)
	apiError(t, err, http.StatusNotFound, "")
}

// Close ends the long-polls and event streams it serves, and leaves no
// goroutine behind; the state may be driven from many goroutines at once
// (run with -race).
func TestCloseAndConcurrency(t *testing.T) {
	before := runtime.NumGoroutine()
	s := New(nil, Config{})
	c := s.Client()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				_, _ = c.Leader(context.Background())
			}
		})
	}
	for token := int64(1); token <= 50; token++ {
		s.Lead(token, time.Minute)
		s.Lose(api.ChangeReleased)
	}
	wg.Wait()

	rev := s.Leader().Revision
	for range 4 {
		wg.Go(func() { _, _ = c.WaitLeader(context.Background(), rev, time.Minute) })
		wg.Go(func() {
			if resp, err := fakeHTTP(s).Get(s.URL + "/events"); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	for len(s.CallsTo(http.MethodGet, "/events")) < 4 || len(s.CallsTo(http.MethodGet, "/leader")) < 204 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() { s.Close(); wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the open long-polls and streams")
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// fakeHTTP is the fake's own HTTP client, whose connections Close ends.
func fakeHTTP(s *Sidecar) *http.Client { return s.srv.Client() }

// A blocking acquire of a Lease no one holds answers at once.
func TestWaitAcquireOfAFreeLease(t *testing.T) {
	s := New(t, Config{})
	start := time.Now()
	a, err := s.Client().WaitAcquire(context.Background(), 20*time.Second)
	if err != nil || !a.Acquired || a.FencingToken != 1 || time.Since(start) > 10*time.Second {
		t.Fatalf("WaitAcquire: %+v, %v after %v", a, err, time.Since(start))
	}
}
