// Package apitest is a fake leader-elector sidecar for an application's
// unit tests: an httptest server that answers the application API
// (docs/api.md) in the sidecar's own wire format, whose state the test
// drives. The test makes this pod lead, lose, see another holder or own
// partitions, and asserts on what the app did (Calls), without a cluster.
//
//	s := apitest.New(t, apitest.Config{})
//	s.Lead(7, time.Minute)        // this pod leads in term 7
//	app := startApp(s.URL)        // the code under test, pointed at the fake
//	s.Lose(api.ChangeRenewDeadline) // the app sees "event: lost" and stops
//
// Like the api package it needs the standard library only. httpapi's drift
// test keeps its answers byte for byte those of the real handler.
package apitest

import (
	"fmt"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Config describes the pod the fake sidecar serves; every field has a
// default.
type Config struct {
	// Namespace and Name name the Lease ("default", "my-app"), or the
	// partition group in partition mode.
	Namespace, Name string
	// Identity is this pod's identity ("my-app-0").
	Identity string
	// LeaseDurationSeconds is the Lease's duration (15).
	LeaseDurationSeconds int32
	// Partitions > 0 serves partition mode (--partitions) with that many
	// partitions: GET /partitions and the calls on one partition instead
	// of /leader, /release and /acquire.
	Partitions int
	// Observer answers POST /acquire 409 as --candidate=false does.
	Observer bool
	// AcquireValidFor is how long a term won through POST /acquire is
	// valid before it runs out (10s, the default renew deadline); the
	// test extends it with Lead.
	AcquireValidFor time.Duration
	// KeepAlive is the interval of GET /events' keep-alive comments (15s).
	KeepAlive time.Duration
	// Now is the fake's clock (time.Now). Every time in an answer, and
	// validForMs, is read from it; a fixed clock makes answers
	// reproducible. Claims run out on it too (see Lead).
	Now func() time.Time
}

func (c *Config) setDefaults() {
	set := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	set(&c.Namespace, "default")
	set(&c.Name, "my-app")
	set(&c.Identity, "my-app-0")
	if c.LeaseDurationSeconds == 0 {
		c.LeaseDurationSeconds = 15
	}
	if c.AcquireValidFor <= 0 {
		c.AcquireValidFor = 10 * time.Second
	}
	if c.KeepAlive <= 0 {
		c.KeepAlive = 15 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Call is one request the app made.
type Call struct {
	Method, Path string
	Query        url.Values
	// Body is the request's body (a checkpoint's value), at most 64 KiB.
	Body string
	// Status is the answer's status code (0 while a long-poll waits).
	Status int
}

// Sidecar is a running fake sidecar. Its methods are safe for concurrent
// use; Close (or the end of the test given to New) stops it and every
// long-poll and event stream it serves.
type Sidecar struct {
	// URL is the API's base URL, as LEADER_ELECTOR_URL would give it.
	URL string

	cfg    Config
	srv    *httptest.Server
	tb     testing.TB
	closed chan struct{}

	mu      sync.Mutex
	leader  leaderState
	parts   partitionsState
	changed chan struct{} // closed at the next change of revision
	expiry  *time.Timer

	// callsMu guards calls apart from mu: an answer's status is noted
	// while a handler holds mu.
	callsMu sync.Mutex
	calls   []*Call
}

// New starts a fake sidecar. With a tb, it is closed when the test ends
// and misuse (a token going back) fails the test; with nil, the caller
// closes it and misuse panics.
func New(tb testing.TB, cfg Config) *Sidecar {
	cfg.setDefaults()
	s := &Sidecar{cfg: cfg, tb: tb, closed: make(chan struct{}), changed: make(chan struct{})}
	s.leader = leaderState{revision: 1}
	s.parts = newPartitionsState(cfg.Partitions)
	s.srv = httptest.NewServer(s.routes())
	s.URL = s.srv.URL
	if tb != nil {
		tb.Cleanup(s.Close)
	}
	return s
}

// Client returns an api.Client of the fake.
func (s *Sidecar) Client() *api.Client { return api.NewClient(s.URL, s.srv.Client()) }

// Close ends the open long-polls and event streams, then stops the server.
// It may be called more than once.
func (s *Sidecar) Close() {
	s.mu.Lock()
	select {
	case <-s.closed:
		s.mu.Unlock()
		return
	default:
	}
	close(s.closed)
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.mu.Unlock()
	s.srv.Close()
}

// Calls returns the requests the app made so far, in order.
func (s *Sidecar) Calls() []Call {
	s.callsMu.Lock()
	defer s.callsMu.Unlock()
	out := make([]Call, len(s.calls))
	for i, c := range s.calls {
		out[i] = *c
	}
	return out
}

// CallsTo returns the calls of one method and path, e.g. ("POST",
// "/release") or ("PUT", "/partitions/3/checkpoint").
func (s *Sidecar) CallsTo(method, path string) []Call {
	var out []Call
	for _, c := range s.Calls() {
		if c.Method == method && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// fail reports a misuse of the fake by the test.
func (s *Sidecar) fail(format string, args ...any) {
	if s.tb != nil {
		s.tb.Helper()
		s.tb.Fatalf("apitest: "+format, args...)
	}
	panic(fmt.Sprintf("apitest: "+format, args...))
}

// bump ends the current revision: waiters wake up. Called with mu held.
func (s *Sidecar) bump(revision *uint64) {
	*revision++
	close(s.changed)
	s.changed = make(chan struct{})
}

// now reads the fake's clock.
func (s *Sidecar) now() time.Time { return s.cfg.Now() }

// scheduleExpiry wakes the fake when the earliest claim runs out, so that
// waiters see it end. Called with mu held.
func (s *Sidecar) scheduleExpiry(deadline time.Time) {
	if s.expiry != nil {
		s.expiry.Stop()
	}
	if deadline.IsZero() {
		return
	}
	s.expiry = time.AfterFunc(max(deadline.Sub(s.now()), 0)+time.Millisecond, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		select {
		case <-s.closed:
		default:
			s.expire()
		}
	})
}

// expire ends the claims whose validUntil has passed (renew-deadline, at
// validUntil). The expiry timer calls it a moment after the earliest
// validUntil; every answer and every check of a claim calls it first too,
// so that, as from the sidecar, no answer shows a claim past its
// validUntil, not even in that moment. Called with mu held.
func (s *Sidecar) expire() {
	now := s.now()
	if s.leader.isLeader && !now.Before(s.leader.validUntil) {
		s.loseLocked(api.ChangeRenewDeadline, s.leader.validUntil)
	}
	s.expireParts(now)
	s.scheduleExpiry(s.nextDeadline())
}

// nextDeadline is the earliest validUntil of a claim still held.
func (s *Sidecar) nextDeadline() time.Time {
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	if s.leader.isLeader {
		consider(s.leader.validUntil)
	}
	for _, p := range s.parts.list {
		if p.owned {
			consider(p.validUntil)
		}
	}
	return next
}
