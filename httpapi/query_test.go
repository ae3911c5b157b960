package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// countingPartitions counts the releases it is asked for.
type countingPartitions struct {
	*fakePartitions
	releases atomic.Int32
}

func (c *countingPartitions) ReleaseTerm(ctx context.Context, i int, token int64) (ownership.State, error) {
	c.releases.Add(1)
	return c.fakePartitions.ReleaseTerm(ctx, i, token)
}

// TestMalformedQuery: a query string url.ParseQuery refuses (a bad
// escape, a ";" separator) is answered 400 with a JSON error on every
// route, before the handler acts: no release, no long-poll, no stream.
func TestMalformedQuery(t *testing.T) {
	targets := []struct{ method, path string }{
		{http.MethodGet, "/leader"},
		{http.MethodGet, "/"},
		{http.MethodGet, "/events"},
		{http.MethodPost, "/release"},
		{http.MethodPost, "/acquire"},
	}
	partitionTargets := []struct{ method, path string }{
		{http.MethodGet, "/partitions"},
		{http.MethodGet, "/events"},
		{http.MethodPost, "/partitions/1/release"},
		{http.MethodPut, "/partitions/1/checkpoint"},
	}
	probeTargets := []struct{ method, path string }{
		{http.MethodGet, "/readyz"},
		{http.MethodGet, "/healthz"},
		{http.MethodGet, "/metrics"},
	}
	queries := []string{"%", "%zz", "%zz=1", "wait=1ms;revision=1", "a=1;b=2", "wait=%G0", ";", "x=%", "fencingToken=7;x=1", "fencingToken=%G7"}

	for _, q := range queries {
		for _, tg := range targets {
			t.Run("leader election "+tg.method+" "+tg.path+"?"+q, func(t *testing.T) {
				el := newFakeElection(leaderState())
				var releases atomic.Int32
				el.release = func(context.Context) (leadership.State, error) {
					releases.Add(1)
					return followerState(), nil
				}
				w := serve(NewAPIHandler(el, APIOptions{}), newRequest(t, tg.method, tg.path+"?"+q))
				msg := checkJSONError(t, w, http.StatusBadRequest)
				if !strings.Contains(msg, "malformed query string") {
					t.Errorf("error %q does not say the query string is malformed", msg)
				}
				if n := releases.Load(); n != 0 {
					t.Errorf("Release called %d times despite a malformed query", n)
				}
			})
		}
		for _, tg := range partitionTargets {
			t.Run("partition mode "+tg.method+" "+tg.path+"?"+q, func(t *testing.T) {
				p := &countingPartitions{fakePartitions: newFakePartitions()}
				w := serve(NewPartitionsAPIHandler(p, APIOptions{}), newRequest(t, tg.method, tg.path+"?"+q))
				checkJSONError(t, w, http.StatusBadRequest)
				if n := p.releases.Load(); n != 0 {
					t.Errorf("Release called %d times despite a malformed query", n)
				}
			})
		}
		for _, tg := range probeTargets {
			t.Run("probes "+tg.method+" "+tg.path+"?"+q, func(t *testing.T) {
				h := NewProbeHandler(newFakeElection(leaderState()), ReadyWhenLeader, prometheus.NewRegistry())
				checkJSONError(t, serve(h, newRequest(t, tg.method, tg.path+"?"+q)), http.StatusBadRequest)
			})
		}
	}
}

// TestWellFormedQueryStillServed: an empty query ("?") and well-formed
// parameters are served as before.
func TestWellFormedQueryStillServed(t *testing.T) {
	for _, target := range []string{"/leader?", "/leader?wait=0s", "/leader?wait=1ms&revision=1", "/leader?revision=12&wait=1ms", "/?"} {
		t.Run(target, func(t *testing.T) {
			w := serve(NewAPIHandler(newFakeElection(leaderState()), APIOptions{}), newRequest(t, http.MethodGet, target))
			if w.Code != http.StatusOK {
				t.Errorf("GET %s = %d %s, want 200", target, w.Code, w.Body)
			}
		})
	}
}

// TestPartitionNumberCanonical: a partition number is canonical decimal;
// any other spelling of one (a sign, leading zeros, a percent-encoded
// digit) is no partition, and nothing is released.
func TestPartitionNumberCanonical(t *testing.T) {
	for _, tc := range []struct {
		path       string
		wantStatus int
		wantBody   string
	}{
		{"/partitions/+1/release", http.StatusNotFound, `no such partition \"+1\": want a number in canonical decimal`},
		{"/partitions/01/release", http.StatusNotFound, `no such partition \"01\"`},
		{"/partitions/0001/release", http.StatusNotFound, `no such partition \"0001\"`},
		{"/partitions/-0/release", http.StatusNotFound, `no such partition \"-0\"`},
		{"/partitions/%31/release", http.StatusNotFound, `no such partition \"%31\"`},
		{"/partitions/1%20/release", http.StatusNotFound, `no such partition \"1%20\"`},
		{"/partitions//release", http.StatusNotFound, `no such partition \"\"`},
		{"/partitions/99999999999999999999/release", http.StatusNotFound, `no such partition \"99999999999999999999\"`},
	} {
		t.Run(tc.path, func(t *testing.T) {
			p := &countingPartitions{fakePartitions: newFakePartitions()}
			w := serve(NewPartitionsAPIHandler(p, APIOptions{}), httptest.NewRequest(http.MethodPost, tc.path, nil))
			if w.Code != tc.wantStatus || !strings.Contains(w.Body.String(), tc.wantBody) {
				t.Errorf("POST %s = %d %s, want %d containing %s", tc.path, w.Code, w.Body, tc.wantStatus, tc.wantBody)
			}
			if n := p.releases.Load(); n != 0 {
				t.Errorf("Release called %d times for %s", n, tc.path)
			}
		})
	}
	for _, path := range []string{"/partitions/0/release", "/partitions/1/release"} {
		p := &countingPartitions{fakePartitions: newFakePartitions()}
		serve(NewPartitionsAPIHandler(p, APIOptions{}), httptest.NewRequest(http.MethodPost, path, nil))
		if n := p.releases.Load(); n != 1 {
			t.Errorf("POST %s: Release called %d times, want 1", path, n)
		}
	}
}

// TestAcceptQValues: a media range whose q is not an RFC 9110 qvalue (0 to
// 1, at most three decimals) is ignored, like a malformed one; it no longer
// counts as q=1 or, with NaN, wins by its position.
func TestAcceptQValues(t *testing.T) {
	for _, tc := range []struct {
		accept    string
		wantPlain bool
		wantErr   bool
	}{
		{accept: "text/plain;q=NaN, application/json"},
		{accept: "application/json;q=NaN, text/plain", wantPlain: true},
		{accept: "text/plain;q=2", wantErr: true},
		{accept: "text/plain;q=-1, application/json;q=0.1"},
		{accept: "text/plain;q=1e0", wantErr: true},
		{accept: "text/plain;q=0.5, application/json;q=1.5", wantPlain: true},
		{accept: "text/plain;q=0.0001, application/json;q=0.001"},
		{accept: "text/plain;q=1.000, application/json;q=0.999", wantPlain: true},
		{accept: "text/plain;q=0.", wantErr: true},
	} {
		t.Run(tc.accept, func(t *testing.T) {
			plain, err := wantsPlainText([]string{tc.accept})
			if plain != tc.wantPlain || (err != nil) != tc.wantErr {
				t.Errorf("wantsPlainText(%q) = %v, %v; want %v, error %v", tc.accept, plain, err, tc.wantPlain, tc.wantErr)
			}
		})
	}
}

// TestWaitAboveBoundRefused: a ?wait= above the longest one call may take
// is refused with a 400 that names the bound, on every endpoint that takes
// one, as POST /acquire always did; GET /leader and GET /partitions no
// longer cap it to 5m without a word.
func TestWaitAboveBoundRefused(t *testing.T) {
	for _, wait := range []string{"10m", "5m0.000000001s", "1000h"} {
		for _, tc := range []struct {
			name    string
			handler http.Handler
			method  string
			path    string
		}{
			{"GET /leader", NewAPIHandler(newFakeElection(followerState()), APIOptions{}), http.MethodGet, "/leader"},
			{"GET /leader with revision", NewAPIHandler(newFakeElection(followerState()), APIOptions{}), http.MethodGet, "/leader?revision=1&"},
			{"POST /acquire", NewAPIHandler(newFakeElection(followerState()), APIOptions{}), http.MethodPost, "/acquire"},
			{"GET /partitions", NewPartitionsAPIHandler(newFakePartitions(), APIOptions{}), http.MethodGet, "/partitions"},
		} {
			t.Run(tc.name+" wait="+wait, func(t *testing.T) {
				target := tc.path
				if !strings.Contains(target, "?") {
					target += "?"
				}
				target += "wait=" + wait
				// A wait that were served would long-poll: the deadline ends
				// it in a 200 the test refuses, rather than after 5 minutes.
				r := newRequest(t, tc.method, target)
				ctx, cancel := context.WithTimeout(r.Context(), time.Second)
				defer cancel()
				msg := checkJSONError(t, serve(tc.handler, r.WithContext(ctx)), http.StatusBadRequest)
				if !strings.Contains(msg, "at most 5m0s") {
					t.Errorf("error %q does not name the bound 5m0s", msg)
				}
			})
		}
	}
}
