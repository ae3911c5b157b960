package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leadership/leadershiptest"
)

// fakeElection is an Election whose state the test sets: leadershiptest's
// Source, with the calls httpapi makes besides Snapshot and Watch.
type fakeElection struct {
	*leadershiptest.Source
	// watched receives a value on every Watch call, if set; it needs room
	// for all of them.
	watched chan struct{}

	release      func(ctx context.Context) (leadership.State, error)
	acquire      func(ctx context.Context, opts leadership.AcquireOptions) (leadership.State, bool, error)
	candidateErr error
	healthyErr   error
}

func newFakeElection(s leadership.State) *fakeElection {
	return &fakeElection{Source: leadershiptest.NewSource(s)}
}

// Watch is the Source's, telling watched of every call.
func (f *fakeElection) Watch() (leadership.State, <-chan struct{}) {
	s, ch := f.Source.Watch()
	if f.watched != nil {
		f.watched <- struct{}{}
	}
	return s, ch
}

func (f *fakeElection) ReleaseTerm(ctx context.Context, _ int64) (leadership.State, error) {
	if f.release == nil {
		return f.Snapshot(), leadership.ErrNotLeader
	}
	return f.release(ctx)
}

func (f *fakeElection) Acquire(ctx context.Context, opts leadership.AcquireOptions) (leadership.State, bool, error) {
	if f.acquire == nil {
		s := f.Snapshot()
		return s, s.IsLeader, nil
	}
	return f.acquire(ctx, opts)
}

func (f *fakeElection) Candidate() error { return f.candidateErr }
func (f *fakeElection) Healthy() error   { return f.healthyErr }

// set changes the state, bumps the revision and wakes watchers, as the
// tracker does. It never blocks.
func (f *fakeElection) set(change func(s *leadership.State)) leadership.State {
	return f.Set(change)
}

// The sample states and their moments are leadershiptest's, shared with
// notify's tests.
var (
	renewTime   = leadershiptest.RenewTime
	leaderSince = leadershiptest.LeaderSince
	validUntil  = leadershiptest.ValidUntil
)

func followerState() leadership.State { return leadershiptest.Follower() }

func leaderState() leadership.State { return leadershiptest.Leader() }

func newRequest(t *testing.T, method, target string) *http.Request {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	return httptest.NewRequestWithContext(ctx, method, target, nil)
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func decodeJSON(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", w.Body.String(), err)
	}
	return m
}

// checkJSONError checks an error answer: status, JSON content type, an
// "error" field and nothing else.
func checkJSONError(t *testing.T, w *httptest.ResponseRecorder, status int) string {
	t.Helper()
	if w.Code != status {
		t.Errorf("status = %d, want %d (body %q)", w.Code, status, w.Body.String())
	}
	m := decodeJSON(t, w)
	msg, ok := m["error"].(string)
	if !ok || msg == "" || len(m) != 1 {
		t.Errorf("body = %s, want {\"error\": \"...\"}", w.Body.String())
	}
	return msg
}

func TestLeaderJSON(t *testing.T) {
	inParis := time.FixedZone("CET", 3600)
	for _, tc := range []struct {
		name  string
		state leadership.State
		want  string
	}{
		{
			name:  "leader",
			state: leaderState(),
			want: `{
				"lease": {"namespace": "default", "name": "my-app"},
				"identity": "my-app-7d9f-abcde",
				"holder": "my-app-7d9f-abcde",
				"isLeader": true,
				"fencingToken": 7,
				"leaseDurationSeconds": 15,
				"renewTime": "2026-11-29T08:00:00.123456Z",
				"leaderSince": "2026-11-29T07:58:01.000000Z",
				"validUntil": "2026-11-29T08:00:10.123456Z",
				"validForMs": 2500,
				"revision": 12,
				"degraded": false
			}`,
		},
		{
			name: "after a change, degraded",
			state: func() leadership.State {
				s := leaderState()
				s.LastChange = leadership.Change{Leader: true, Reason: leadership.ReasonAcquired, At: leaderSince, FencingToken: 7}
				s.Degraded = "app unhealthy"
				return s
			}(),
			want: `{
				"lease": {"namespace": "default", "name": "my-app"},
				"identity": "my-app-7d9f-abcde",
				"holder": "my-app-7d9f-abcde",
				"isLeader": true,
				"fencingToken": 7,
				"leaseDurationSeconds": 15,
				"renewTime": "2026-11-29T08:00:00.123456Z",
				"leaderSince": "2026-11-29T07:58:01.000000Z",
				"validUntil": "2026-11-29T08:00:10.123456Z",
				"validForMs": 2500,
				"revision": 12,
				"lastChange": {"isLeader": true, "reason": "acquired", "at": "2026-11-29T07:58:01.000000Z", "fencingToken": 7},
				"degraded": true,
				"degradedReason": "app unhealthy"
			}`,
		},
		{
			name:  "follower: no leaderSince, no validUntil",
			state: followerState(),
			want: `{
				"lease": {"namespace": "default", "name": "my-app"},
				"identity": "my-app-7d9f-abcde",
				"holder": "my-app-7d9f-xyz12",
				"isLeader": false,
				"fencingToken": 7,
				"leaseDurationSeconds": 15,
				"renewTime": "2026-11-29T08:00:00.123456Z",
				"revision": 12,
				"degraded": false
			}`,
		},
		{
			name: "follower with the holder's advertised address",
			state: func() leadership.State {
				s := followerState()
				s.HolderAddress = "10.0.0.5:8080"
				return s
			}(),
			want: `{
				"lease": {"namespace": "default", "name": "my-app"},
				"identity": "my-app-7d9f-abcde",
				"holder": "my-app-7d9f-xyz12",
				"isLeader": false,
				"fencingToken": 7,
				"leaseDurationSeconds": 15,
				"renewTime": "2026-11-29T08:00:00.123456Z",
				"holderAddress": "10.0.0.5:8080",
				"revision": 12,
				"degraded": false
			}`,
		},
		{
			name:  "nothing known: empty holder, no times",
			state: leadership.State{Namespace: "ns", Name: "n", Identity: "me"},
			want: `{
				"lease": {"namespace": "ns", "name": "n"},
				"identity": "me",
				"holder": "",
				"isLeader": false,
				"fencingToken": 0,
				"leaseDurationSeconds": 0,
				"revision": 0,
				"degraded": false
			}`,
		},
		{
			name: "times in another zone are given in UTC",
			state: func() leadership.State {
				s := leaderState()
				s.RenewTime = renewTime.In(inParis)
				s.LeaderSince = leaderSince.In(inParis)
				s.ValidUntil = validUntil.In(inParis)
				return s
			}(),
			want: `{
				"lease": {"namespace": "default", "name": "my-app"},
				"identity": "my-app-7d9f-abcde",
				"holder": "my-app-7d9f-abcde",
				"isLeader": true,
				"fencingToken": 7,
				"leaseDurationSeconds": 15,
				"renewTime": "2026-11-29T08:00:00.123456Z",
				"leaderSince": "2026-11-29T07:58:01.000000Z",
				"validUntil": "2026-11-29T08:00:10.123456Z",
				"validForMs": 2500,
				"revision": 12,
				"degraded": false
			}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// 2.5 s before the claim's end (the state's Deadline).
			clk := clocktesting.NewFakePassiveClock(validUntil.Add(-2500 * time.Millisecond))
			h := NewAPIHandler(newFakeElection(tc.state), APIOptions{Clock: clk})
			w := serve(h, newRequest(t, http.MethodGet, "/leader"))
			if w.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", w.Code)
			}
			got := decodeJSON(t, w)
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatalf("bad test: %v", err)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("GET /leader =\n%v\nwant\n%v", got, want)
			}
			if !strings.HasSuffix(w.Body.String(), "}\n") {
				t.Errorf("body %q does not end with a newline", w.Body.String())
			}
		})
	}
}

func TestLeaderAccept(t *testing.T) {
	const holder = "my-app-7d9f-xyz12"
	for _, tc := range []struct {
		name   string
		accept []string
		// wantPlain: text/plain; else JSON; wantStatus 406 for neither.
		wantPlain  bool
		wantStatus int
	}{
		{name: "no Accept", wantStatus: http.StatusOK},
		{name: "JSON", accept: []string{"application/json"}, wantStatus: http.StatusOK},
		{name: "anything", accept: []string{"*/*"}, wantStatus: http.StatusOK},
		{name: "application/*", accept: []string{"application/*"}, wantStatus: http.StatusOK},
		{name: "text/plain", accept: []string{"text/plain"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "text/plain with charset", accept: []string{"text/plain; charset=utf-8"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "text/*", accept: []string{"text/*"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "upper case", accept: []string{"Text/Plain"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "plain first at equal q", accept: []string{"text/plain, application/json"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "JSON first at equal q", accept: []string{"application/json, text/plain"}, wantStatus: http.StatusOK},
		{name: "plain preferred by q", accept: []string{"application/json;q=0.5, text/plain"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "JSON preferred by q", accept: []string{"text/plain;q=0.5, application/json;q=0.9"}, wantStatus: http.StatusOK},
		{name: "curl default", accept: []string{"*/*"}, wantStatus: http.StatusOK},
		{name: "browser", accept: []string{"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}, wantStatus: http.StatusOK},
		{name: "several headers", accept: []string{"text/html", "text/plain;q=0.4"}, wantPlain: true, wantStatus: http.StatusOK},
		{name: "plain refused, anything else accepted", accept: []string{"text/plain;q=0, */*"}, wantStatus: http.StatusOK},
		{name: "HTML only", accept: []string{"text/html"}, wantStatus: http.StatusNotAcceptable},
		{name: "everything refused", accept: []string{"text/plain;q=0, application/json;q=0"}, wantStatus: http.StatusNotAcceptable},
		{name: "XML only", accept: []string{"application/xml"}, wantStatus: http.StatusNotAcceptable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewAPIHandler(newFakeElection(followerState()), APIOptions{})
			r := newRequest(t, http.MethodGet, "/leader")
			for _, a := range tc.accept {
				r.Header.Add("Accept", a)
			}
			w := serve(h, r)
			switch {
			case tc.wantStatus == http.StatusNotAcceptable:
				checkJSONError(t, w, http.StatusNotAcceptable)
			case tc.wantPlain:
				if w.Code != http.StatusOK {
					t.Errorf("status = %d, want 200", w.Code)
				}
				if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("Content-Type = %q, want text/plain", ct)
				}
				if got := w.Body.String(); got != holder+"\n" {
					t.Errorf("body = %q, want %q", got, holder+"\n")
				}
			default:
				if w.Code != http.StatusOK {
					t.Errorf("status = %d, want 200", w.Code)
				}
				if got := decodeJSON(t, w)["holder"]; got != holder {
					t.Errorf("holder = %v, want %q", got, holder)
				}
			}
		})
	}

	t.Run("no holder", func(t *testing.T) {
		h := NewAPIHandler(newFakeElection(leadership.State{Name: "n", Namespace: "ns"}), APIOptions{})
		r := newRequest(t, http.MethodGet, "/leader")
		r.Header.Set("Accept", "text/plain")
		if got := serve(h, r).Body.String(); got != "\n" {
			t.Errorf("body = %q, want a bare newline", got)
		}
	})
}

func TestParseLeaderQuery(t *testing.T) {
	for _, tc := range []struct {
		query   string
		want    leaderQuery
		wantErr bool
	}{
		{query: "", want: leaderQuery{}},
		{query: "wait=30s", want: leaderQuery{wait: 30 * time.Second}},
		{query: "wait=1m30s&revision=12", want: leaderQuery{wait: 90 * time.Second, revision: 12, hasRevision: true}},
		{query: "wait=5m", want: leaderQuery{wait: 5 * time.Minute}},
		{query: "wait=10m", wantErr: true},
		{query: "wait=5m0.000000001s", wantErr: true},
		{query: "wait=1000h", wantErr: true},
		{query: "wait=0s", want: leaderQuery{}},
		{query: "revision=0", want: leaderQuery{hasRevision: true}},
		{query: "revision=18446744073709551615", want: leaderQuery{revision: 1<<64 - 1, hasRevision: true}},
		{query: "wait=-1s", wantErr: true},
		{query: "wait=30", wantErr: true},
		{query: "wait=soon", wantErr: true},
		{query: "wait=", wantErr: true},
		{query: "revision=-1", wantErr: true},
		{query: "revision=abc", wantErr: true},
		{query: "revision=", wantErr: true},
		{query: "revision=18446744073709551616", wantErr: true},
		{query: "timeout=30s", wantErr: true},
		{query: "wait=1s&wait=2s", wantErr: true},
		{query: "revision=1&revision=2", wantErr: true},
	} {
		t.Run(tc.query, func(t *testing.T) {
			v, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatalf("bad test: %v", err)
			}
			got, err := parseLeaderQuery(v)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseLeaderQuery(%q) error = %v, want error: %v", tc.query, err, tc.wantErr)
			}
			if err == nil && got != tc.want {
				t.Errorf("parseLeaderQuery(%q) = %+v, want %+v", tc.query, got, tc.want)
			}
		})
	}
}

func TestLeaderBadQuery(t *testing.T) {
	for _, query := range []string{"wait=soon", "wait=-5s", "revision=x", "revision=-1", "foo=bar", "wait=1s&wait=1s"} {
		t.Run(query, func(t *testing.T) {
			h := NewAPIHandler(newFakeElection(followerState()), APIOptions{})
			w := serve(h, newRequest(t, http.MethodGet, "/leader?"+query))
			checkJSONError(t, w, http.StatusBadRequest)
		})
	}
}

// longPoll starts GET target on h and returns a channel with the response.
func longPoll(ctx context.Context, h http.Handler, target string, accept string) <-chan *httptest.ResponseRecorder {
	done := make(chan *httptest.ResponseRecorder, 1)
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	go func() { done <- serve(h, r) }()
	return done
}

func receive(t *testing.T, done <-chan *httptest.ResponseRecorder) *httptest.ResponseRecorder {
	t.Helper()
	select {
	case w := <-done:
		return w
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("no response")
		return nil
	}
}

func responseRevision(t *testing.T, w *httptest.ResponseRecorder) uint64 {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200 (body %q)", w.Code, w.Body.String())
	}
	rev, ok := decodeJSON(t, w)["revision"].(float64)
	if !ok {
		t.Fatalf("no revision in %s", w.Body.String())
	}
	return uint64(rev)
}

func TestLeaderLongPoll(t *testing.T) {
	t.Run("returns at once when the revision differs", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		el := newFakeElection(followerState()) // revision 12
		h := NewAPIHandler(el, APIOptions{})
		for _, rev := range []string{"0", "11", "13"} {
			w := receive(t, longPoll(ctx, h, "/leader?wait=5m&revision="+rev, ""))
			if got := responseRevision(t, w); got != 12 {
				t.Errorf("revision=%s: got revision %d, want 12", rev, got)
			}
		}
	})

	for _, tc := range []struct {
		name   string
		target string
		accept string
	}{
		{name: "with the current revision", target: "/leader?wait=5m&revision=12"},
		{name: "without a revision", target: "/leader?wait=5m"},
		{name: "as text", target: "/leader?wait=5m&revision=12", accept: "text/plain"},
	} {
		t.Run("waits for a change "+tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			el := newFakeElection(followerState())
			el.watched = make(chan struct{}, 100)
			h := NewAPIHandler(el, APIOptions{})
			done := longPoll(ctx, h, tc.target, tc.accept)
			select {
			case <-el.watched:
			case <-time.After(wait.ForeverTestTimeout):
				t.Fatal("handler never watched the state")
			}
			select {
			case w := <-done:
				t.Fatalf("answered before any change: %d %s", w.Code, w.Body.String())
			default:
			}
			el.set(func(s *leadership.State) { s.Holder = "pod-new" })
			w := receive(t, done)
			if tc.accept == "text/plain" {
				if got := w.Body.String(); got != "pod-new\n" {
					t.Errorf("body = %q, want %q", got, "pod-new\n")
				}
				return
			}
			if got := responseRevision(t, w); got != 13 {
				t.Errorf("revision = %d, want 13", got)
			}
		})
	}

	t.Run("returns the current state when the wait runs out", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		el := newFakeElection(followerState())
		h := NewAPIHandler(el, APIOptions{})
		w := receive(t, longPoll(ctx, h, "/leader?wait=10ms&revision=12", ""))
		if got := responseRevision(t, w); got != 12 {
			t.Errorf("revision = %d, want 12", got)
		}
	})

	t.Run("returns when the client goes away", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		el := newFakeElection(followerState())
		el.watched = make(chan struct{}, 100)
		h := NewAPIHandler(el, APIOptions{})
		done := longPoll(ctx, h, "/leader?wait=5m&revision=12", "")
		<-el.watched
		cancel()
		receive(t, done)
	})
}

// TestCompat: the paths the retired k8s.gcr.io/leader-elector image served
// and charts still poll answer as it did: 200 with {"name": <holder>} on
// "/" and "/health" and {"isLeader": …} on "/isLeader", on leader and
// follower alike.
func TestCompat(t *testing.T) {
	noHolder := followerState()
	noHolder.Holder = ""
	for _, tc := range []struct {
		name     string
		state    leadership.State
		isLeader bool
	}{
		{name: "leader", state: leaderState(), isLeader: true},
		{name: "follower", state: followerState()},
		{name: "not held", state: noHolder},
	} {
		for _, path := range []string{"/", "/health"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				w := serve(NewAPIHandler(newFakeElection(tc.state), APIOptions{}), newRequest(t, http.MethodGet, path))
				if w.Code != http.StatusOK {
					t.Errorf("status = %d, want 200", w.Code)
				}
				got := decodeJSON(t, w)
				if len(got) != 1 || got["name"] != tc.state.Holder {
					t.Errorf("GET %s = %s, want {\"name\": %q}", path, w.Body.String(), tc.state.Holder)
				}
			})
		}
		t.Run(tc.name+" /isLeader", func(t *testing.T) {
			w := serve(NewAPIHandler(newFakeElection(tc.state), APIOptions{}), newRequest(t, http.MethodGet, "/isLeader"))
			if w.Code != http.StatusOK {
				t.Errorf("status = %d, want 200", w.Code)
			}
			got := decodeJSON(t, w)
			if len(got) != 1 || got["isLeader"] != tc.isLeader {
				t.Errorf("GET /isLeader = %s, want {\"isLeader\": %v}", w.Body.String(), tc.isLeader)
			}
		})
	}
	for _, target := range []string{"/?x=1", "/health?x=1", "/isLeader?x=1"} {
		t.Run("query "+target, func(t *testing.T) {
			w := serve(NewAPIHandler(newFakeElection(followerState()), APIOptions{}), newRequest(t, http.MethodGet, target))
			checkJSONError(t, w, http.StatusBadRequest)
		})
	}
	// Only the old image's known paths are kept: other unknown paths stay a
	// JSON 404.
	w := serve(NewAPIHandler(newFakeElection(followerState()), APIOptions{}), newRequest(t, http.MethodGet, "/healthz"))
	checkJSONError(t, w, http.StatusNotFound)
}

// TestReleaseWaitsForTheDrain: with the proxy's drain, POST /release gives
// the release that much longer before it answers 504.
func TestReleaseWaitsForTheDrain(t *testing.T) {
	const drain = 7 * time.Second
	el := newFakeElection(leaderState())
	var left time.Duration
	el.release = func(ctx context.Context) (leadership.State, error) {
		deadline, _ := ctx.Deadline()
		left = time.Until(deadline)
		return followerState(), nil
	}
	w := serve(NewAPIHandler(el, APIOptions{ReleaseDrain: drain}), newRequest(t, http.MethodPost, "/release"))
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if want := releaseAnswerTimeout + drain; left <= releaseAnswerTimeout || left > want {
		t.Errorf("the release was given %v, want just under %v (the answer's bound and the drain)", left, want)
	}
}

func TestRelease(t *testing.T) {
	released := followerState()
	released.Holder = ""
	released.Revision = 13
	for _, tc := range []struct {
		name       string
		target     string
		release    func(ctx context.Context) (leadership.State, error)
		wantStatus int
		// wantState is the state answered with a 200; wantReleased its
		// "released".
		wantState    leadership.State
		wantReleased bool
	}{
		{
			name:         "leader steps down",
			target:       "/release",
			release:      func(context.Context) (leadership.State, error) { return released, nil },
			wantStatus:   http.StatusOK,
			wantState:    released,
			wantReleased: true,
		},
		{
			// Releasing what one does not hold is a no-op, not an error.
			name:       "not the leader",
			target:     "/release",
			release:    func(context.Context) (leadership.State, error) { return followerState(), leadership.ErrNotLeader },
			wantStatus: http.StatusOK,
			wantState:  followerState(),
		},
		{
			name:   "not the leader, wrapped",
			target: "/release",
			release: func(context.Context) (leadership.State, error) {
				return followerState(), fmt.Errorf("release: %w", leadership.ErrNotLeader)
			},
			wantStatus: http.StatusOK,
			wantState:  followerState(),
		},
		{
			name:   "the lease could not be cleared",
			target: "/release",
			release: func(context.Context) (leadership.State, error) {
				return released, errors.New("update lease default/my-app: connection refused")
			},
			wantStatus: http.StatusBadGateway,
		},
		{
			// A hung API server: the answer must come before the server's
			// write timeout cuts the connection.
			name:   "clearing the lease outlasts the answer's bound",
			target: "/release",
			release: func(ctx context.Context) (leadership.State, error) {
				deadline, ok := ctx.Deadline()
				if !ok || time.Until(deadline) > releaseAnswerTimeout {
					t.Errorf("Release given deadline %v (set: %v), want within %v", deadline, ok, releaseAnswerTimeout)
				}
				return released, fmt.Errorf("clear lease: %w", context.DeadlineExceeded)
			},
			wantStatus: http.StatusGatewayTimeout,
		},
		{
			name:   "query",
			target: "/release?now=1",
			release: func(context.Context) (leadership.State, error) {
				t.Error("Release called despite a bad query")
				return released, nil
			},
			wantStatus: http.StatusBadRequest,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el := newFakeElection(leaderState())
			el.release = tc.release
			w := serve(NewAPIHandler(el, APIOptions{}), newRequest(t, http.MethodPost, tc.target))
			if tc.wantStatus != http.StatusOK {
				msg := checkJSONError(t, w, tc.wantStatus)
				if tc.wantStatus == http.StatusBadGateway && !strings.Contains(msg, "connection refused") {
					t.Errorf("error %q does not give the cause", msg)
				}
				return
			}
			if w.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", w.Code)
			}
			var got api.Release
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
				t.Fatalf("POST /release = %s: %v", w.Body.String(), err)
			}
			if got.Holder != tc.wantState.Holder || got.IsLeader || got.Revision != tc.wantState.Revision || got.Released != tc.wantReleased {
				t.Errorf("POST /release = %s, want the state %+v and released %v", w.Body.String(), tc.wantState, tc.wantReleased)
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		wantStatus     int
		wantAllow      string
	}{
		{method: http.MethodGet, target: "/nope", wantStatus: http.StatusNotFound},
		{method: http.MethodGet, target: "/leader/", wantStatus: http.StatusNotFound},
		{method: http.MethodGet, target: "/readyz", wantStatus: http.StatusNotFound},
		{method: http.MethodPost, target: "/leader", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
		{method: http.MethodDelete, target: "/", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
		{method: http.MethodPut, target: "/events", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
		{method: http.MethodGet, target: "/release", wantStatus: http.StatusMethodNotAllowed, wantAllow: "POST"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			w := serve(NewAPIHandler(newFakeElection(followerState()), APIOptions{}), newRequest(t, tc.method, tc.target))
			checkJSONError(t, w, tc.wantStatus)
			if got := w.Header().Get("Allow"); got != tc.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tc.wantAllow)
			}
		})
	}
}

// SSE

type sseEvent struct {
	id, event, data string
	comment         bool
}

// sseReader reads server-sent events from a stream.
type sseReader struct {
	t  *testing.T
	br *bufio.Reader
}

// next returns the next event or comment block.
func (r *sseReader) next() sseEvent {
	r.t.Helper()
	var ev sseEvent
	for {
		line, err := r.br.ReadString('\n')
		if err != nil {
			r.t.Fatalf("reading the stream: %v (partial line %q)", err, line)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			return ev
		case strings.HasPrefix(line, ":"):
			ev.comment = true
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if ev.data != "" {
				r.t.Fatalf("more than one data line: the JSON must be on one line")
			}
			ev.data = strings.TrimPrefix(line, "data: ")
		default:
			r.t.Fatalf("unexpected line %q", line)
		}
	}
}

// nextEvent skips keep-alive comments and checks the event.
func (r *sseReader) nextEvent() (sseEvent, map[string]any) {
	r.t.Helper()
	for {
		ev := r.next()
		if ev.comment && ev.event == "" && ev.data == "" {
			continue
		}
		if ev.event != "leader" {
			r.t.Fatalf("event = %q, want leader", ev.event)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.data), &m); err != nil {
			r.t.Fatalf("event data %q: %v", ev.data, err)
		}
		if rev := strconv.FormatFloat(m["revision"].(float64), 'f', -1, 64); ev.id != rev {
			r.t.Errorf("id = %q, want the revision %s", ev.id, rev)
		}
		return ev, m
	}
}

// sseServer serves h on real connections with small send buffers, so that a
// client that does not read stalls its stream soon. Its streams belong to
// a streamGroup, as a Server's do, so a test can see them end; and it
// reports whether the connection of each client (named in connect) is in
// a write.
type sseServer struct {
	*httptest.Server
	streams *streamGroup
	// writing maps a connection's remote address to its *atomic.Bool.
	writing sync.Map
	// clients maps a client's name to its connection's local address.
	clients sync.Map
}

// trackingListener shrinks the send buffer of accepted connections and
// records whether a write on each is under way.
type trackingListener struct {
	net.Listener
	s *sseServer
}

func (l trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return c, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	busy, _ := l.s.writing.LoadOrStore(c.RemoteAddr().String(), new(atomic.Bool))
	return trackingConn{Conn: c, busy: busy.(*atomic.Bool)}, nil
}

// trackingConn records whether a write is under way.
type trackingConn struct {
	net.Conn
	busy *atomic.Bool
}

func (c trackingConn) Write(p []byte) (int, error) {
	c.busy.Store(true)
	defer c.busy.Store(false)
	return c.Conn.Write(p)
}

func newSSEServer(t *testing.T, h http.Handler) *sseServer {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	streamCtx, stop := context.WithCancel(ctx)
	s := &sseServer{streams: newStreamGroup(streamCtx.Done(), stop)}
	s.Server = httptest.NewUnstartedServer(h)
	s.Listener = trackingListener{Listener: s.Listener, s: s}
	s.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(streamCtx, streamGroupKey{}, s.streams)
	}
	s.Start()
	t.Cleanup(func() {
		s.Close()
		s.stopStreams(t)
	})
	return s
}

// stopStreams ends the streams, as a Server's Shutdown does, and waits for
// them.
func (s *sseServer) stopStreams(t *testing.T) {
	t.Helper()
	select {
	case <-s.streams.stop():
	case <-time.After(wait.ForeverTestTimeout):
		t.Error("the streams did not end after the server stopped them")
	}
}

// running is the number of streams still running.
func (s *sseServer) running() int {
	s.streams.mu.Lock()
	defer s.streams.mu.Unlock()
	return s.streams.running
}

// waitStreams waits until n streams run.
func (s *sseServer) waitStreams(t *testing.T, n int, why string) {
	t.Helper()
	deadline := time.Now().Add(wait.ForeverTestTimeout)
	for s.running() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d streams run, want %d: %s", s.running(), n, why)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// busy reports whether the connection of client's stream is in a write.
func (s *sseServer) busy(client string) bool {
	addr, ok := s.clients.Load(client)
	if !ok {
		return false
	}
	b, ok := s.writing.Load(addr)
	return ok && b.(*atomic.Bool).Load()
}

// connect opens /events as client; the stream ends when cancel is called.
func (s *sseServer) connect(t *testing.T, client string) (*http.Response, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	// One connection per client; a client that will not read gets a small
	// receive buffer.
	transport := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return c, err
		}
		s.clients.Store(client, c.LocalAddr().String())
		if tc, ok := c.(*net.TCPConn); ok && client == "slow" {
			_ = tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET /events: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		transport.CloseIdleConnections()
	})
	return resp, cancel
}

func TestEvents(t *testing.T) {
	el := newFakeElection(followerState())
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))
	resp, cancel := srv.connect(t, "client")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-cache" {
		t.Errorf("Cache-Control = %q, want no-cache", cc)
	}
	r := &sseReader{t: t, br: bufio.NewReader(resp.Body)}

	// The current state at connect time.
	_, first := r.nextEvent()
	if first["revision"] != float64(12) || first["holder"] != "my-app-7d9f-xyz12" {
		t.Errorf("first event = %v, want the current state", first)
	}

	// One event per change.
	for i, holder := range []string{"pod-1", "", "my-app-7d9f-abcde"} {
		want := el.set(func(s *leadership.State) { s.Holder = holder })
		_, got := r.nextEvent()
		if got["revision"] != float64(want.Revision) || got["holder"] != holder {
			t.Errorf("event after change %d = %v, want revision %d, holder %q", i, got, want.Revision, holder)
		}
	}

	// The stream ends when the client has gone away, at its next writes
	// (the first may still be accepted by the connection).
	srv.waitStreams(t, 1, "one client connected")
	cancel()
	for i := 0; srv.running() != 0; i++ {
		if i == 100 {
			t.Fatal("the stream still runs after 100 changes since its client went away")
		}
		el.set(func(s *leadership.State) { s.Holder = fmt.Sprintf("pod-%d", i) })
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventsKeepAlive(t *testing.T) {
	el := newFakeElection(followerState())
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: 10 * time.Millisecond}))
	resp, _ := srv.connect(t, "client")
	r := &sseReader{t: t, br: bufio.NewReader(resp.Body)}
	if ev := r.next(); ev.event != "leader" {
		t.Fatalf("first block = %+v, want the leader event", ev)
	}
	for i := range 3 {
		if ev := r.next(); !ev.comment || ev.event != "" || ev.data != "" {
			t.Fatalf("block %d = %+v, want a keep-alive comment", i, ev)
		}
	}
	// Keep-alives do not repeat the state.
	want := el.set(func(s *leadership.State) { s.Holder = "pod-2" })
	_, got := r.nextEvent()
	if got["revision"] != float64(want.Revision) {
		t.Errorf("event = %v, want revision %d", got, want.Revision)
	}
}

// TestEventsSlowClient: a client that never reads must not hold up another
// client. Each event is larger than the stalled connection's buffers, so its
// stream blocks in a write at once.
func TestEventsSlowClient(t *testing.T) {
	base := followerState()
	base.Identity = strings.Repeat("x", 64<<10)
	el := newFakeElection(base)
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))

	_, stopSlow := srv.connect(t, "slow") // never read
	fast, _ := srv.connect(t, "fast")
	r := &sseReader{t: t, br: bufio.NewReaderSize(fast.Body, 128<<10)}
	r.nextEvent()
	for i := range 8 {
		holder := fmt.Sprintf("pod-%d", i)
		// The publisher (the tracker closes a channel) never waits for
		// a client.
		want := el.set(func(s *leadership.State) { s.Holder = holder })
		_, got := r.nextEvent()
		if got["revision"] != float64(want.Revision) || got["holder"] != holder {
			t.Fatalf("event %d = revision %v holder %v, want %d %q", i, got["revision"], got["holder"], want.Revision, holder)
		}
	}
	// Make sure the test tested something: the slow client's stream is
	// stuck in a write.
	if !srv.busy("slow") {
		t.Error("the slow client's stream is not blocked in a write; the test proves nothing")
	}
	// The stalled stream fails its write and ends once its client goes
	// away; the other runs on.
	stopSlow()
	srv.waitStreams(t, 1, "the slow client went away")
}

func TestServerLifecycle(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	el := newFakeElection(followerState())
	s, err := Listen(ctx, "127.0.0.1:0", NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve() }()

	// A second server on the same address fails at once.
	if _, err := Listen(ctx, s.Addr(), http.NotFoundHandler()); err == nil {
		t.Error("Listen on an address in use succeeded")
	}

	resp, err := http.Get("http://" + s.Addr() + "/")
	if err != nil {
		t.Fatalf("GET /: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != `{"name":"my-app-7d9f-xyz12"}` {
		t.Errorf("GET / = %d %s", resp.StatusCode, body)
	}

	// An open stream does not hold up the shutdown.
	streamResp, err := http.Get("http://" + s.Addr() + "/events")
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	defer streamResp.Body.Close()
	stream := &sseReader{t: t, br: bufio.NewReader(streamResp.Body)}
	stream.nextEvent()

	// The last change before the shutdown reaches the stream, which then
	// ends.
	last := el.set(func(s *leadership.State) { s.Holder = "" })
	shutdownCtx, cancel := context.WithTimeout(context.Background(), wait.ForeverTestTimeout)
	defer cancel()
	if err := s.Shutdown(shutdownCtx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, got := stream.nextEvent(); got["revision"] != float64(last.Revision) {
		t.Errorf("last event = %v, want revision %d", got, last.Revision)
	}
	if rest, err := io.ReadAll(stream.br); err != nil || len(rest) != 0 {
		t.Errorf("after the last event the stream has %q, %v; want its end", rest, err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve after Shutdown = %v, want nil", err)
		}
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("Serve did not return after Shutdown")
	}
}

// TestEventsAfterShutdownBegan: a stream asked for once the server has
// begun to shut down is not started: its connection is closed.
func TestEventsAfterShutdownBegan(t *testing.T) {
	el := newFakeElection(followerState())
	srv := newSSEServer(t, NewAPIHandler(el, APIOptions{KeepAlive: time.Hour}))
	srv.stopStreams(t)
	resp, err := http.Get(srv.URL + "/events")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /events during shutdown = %d %q, want the connection closed", resp.StatusCode, body)
	}
	if n := srv.running(); n != 0 {
		t.Errorf("%d streams run", n)
	}
}

// TestLeaderBodyIsTheAnswer: what --on-change-url receives (LeaderBody) is
// GET /leader's answer at the same state, less validForMs, so that the two
// bodies cannot drift apart.
func TestLeaderBodyIsTheAnswer(t *testing.T) {
	validForMs := regexp.MustCompile(`,"validForMs":[0-9]+`)
	for name, s := range map[string]leadership.State{"follower": followerState(), "leader": leaderState()} {
		t.Run(name, func(t *testing.T) {
			w := serve(NewAPIHandler(newFakeElection(s), APIOptions{}), newRequest(t, http.MethodGet, "/leader"))
			body, err := LeaderBody(s)
			if err != nil {
				t.Fatal(err)
			}
			if want := validForMs.ReplaceAllString(w.Body.String(), ""); string(body) != want {
				t.Errorf("LeaderBody = %s, want GET /leader's %s", body, want)
			}
		})
	}
}
