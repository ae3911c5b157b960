// Package httpapi serves the election state over HTTP: the application API
// (GET /leader, long-poll, SSE, POST /release) for the app on localhost, and
// the probe server (/readyz, /healthz, /metrics) for the kubelet and
// Prometheus. It reads the state through the Election interface and knows
// nothing of the Kubernetes API.
package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/election"
)

// Election is what the HTTP servers need from the elector.
type Election interface {
	// Snapshot returns the current state.
	Snapshot() election.State
	// Watch returns the current state and a channel closed at its next change.
	Watch() (election.State, <-chan struct{})
	// Release makes the leader step down; election.ErrNotLeader if it is not.
	Release(ctx context.Context) (election.State, error)
	// Acquire tries to take the Lease and reports whether this pod leads;
	// election.ErrObserver on an observer.
	Acquire(ctx context.Context, opts election.AcquireOptions) (election.State, bool, error)
	// Candidate fails until the elector runs and has reached the API server.
	Candidate() error
	// Healthy fails when the elector is wedged.
	Healthy() error
}

const (
	// maxWait caps ?wait= on long-polls.
	maxWait = 5 * time.Minute
	// writeGrace is how long one response write may block before the client
	// is considered gone; it bounds what a slow client can hold on to.
	writeGrace = 10 * time.Second
	// defaultKeepAlive is the SSE comment interval that keeps proxies from
	// closing an idle stream.
	defaultKeepAlive = 15 * time.Second
)

// APIOptions tune the application API.
type APIOptions struct {
	// KeepAlive is the interval of SSE keep-alive comments; 15s if zero.
	KeepAlive time.Duration
	// Acquire is what POST /acquire does without a query: its attempts
	// and their spacing (--acquire-retries, --acquire-retry-delay); one
	// attempt if zero.
	Acquire election.AcquireOptions
}

// NewAPIHandler returns the application API handler.
func NewAPIHandler(el Election, opts APIOptions) http.Handler {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = defaultKeepAlive
	}
	a := &leaderAPI{el: el, keepAlive: opts.KeepAlive, acquire: opts.Acquire}
	return routes{
		// The retired k8s.gcr.io/leader-elector image answered every path
		// with {"name": <holder>} (one catch-all handler) and /isLeader with
		// {"isLeader": …}. Charts poll "/" and "/health" on its --http port;
		// those two and /isLeader are kept, while other unknown paths stay
		// a JSON 404 as this API promises.
		"/": {
			http.MethodGet: a.compat,
		},
		"/health": {
			http.MethodGet: a.compat,
		},
		"/isLeader": {
			http.MethodGet: a.compatIsLeader,
		},
		"/leader": {
			http.MethodGet: a.leader,
		},
		"/events": {
			http.MethodGet: a.events,
		},
		"/release": {
			http.MethodPost: a.release,
		},
		"/acquire": {
			http.MethodPost: a.acquireHandler,
		},
	}
}

type leaderAPI struct {
	el        Election
	keepAlive time.Duration
	acquire   election.AcquireOptions
	// encoded is the JSON of the last state served: most requests find the
	// state unchanged and reuse it.
	encoded atomic.Pointer[encodedState]
	// chunks are the SSE events of the last change, shared by the streams.
	chunks eventChunks
}

type encodedState struct {
	state election.State
	body  []byte
}

// leaderBody returns the JSON of s, with a trailing newline.
func (a *leaderAPI) leaderBody(s election.State) ([]byte, error) {
	if c := a.encoded.Load(); c != nil && c.state == s {
		return c.body, nil
	}
	body, err := marshalJSON(leaderJSON(s))
	if err != nil {
		return nil, err
	}
	body = append(body, '\n')
	a.encoded.Store(&encodedState{state: s, body: body})
	return body, nil
}

// leader answers GET /leader, optionally as a long-poll.
func (a *leaderAPI) leader(w http.ResponseWriter, r *http.Request) {
	q, ok := waitQuery(w, r)
	if !ok {
		return
	}
	plain, err := wantsPlainText(r.Header.Values("Accept"))
	if err != nil {
		writeError(w, http.StatusNotAcceptable, err.Error())
		return
	}

	state := a.el.Snapshot()
	if q.wait > 0 {
		state = waitFor(w, r, q, a.leaderSource())
	}
	if plain {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, state.Holder)
		return
	}
	body, err := a.leaderBody(state)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "could not encode the response")
		return
	}
	writeBody(w, http.StatusOK, body)
}

// leaderSource is the election state as long-polls and SSE follow it.
func (a *leaderAPI) leaderSource() watchable[election.State] {
	return watchable[election.State]{
		watch:    a.el.Watch,
		revision: func(s election.State) uint64 { return s.Revision },
		event:    "leader",
		// The body GET /leader serves, without its newline: encoded once
		// per state, not once per stream (1 000 streams, one encoding).
		encode: func(s election.State) ([]byte, error) {
			body, err := a.leaderBody(s)
			if err != nil {
				return nil, err
			}
			return body[:len(body)-1], nil
		},
		before: lostEvent,
		chunks: &a.chunks,
	}
}

// lostEvent is the "lost" event sent ahead of the state in which this pod
// is seen to have stopped leading (a term of its own ended since the last
// state sent), with why: the onLost of a Lease API.
func lostEvent(prev, cur election.State) (string, []byte, bool) {
	if cur.LastLost == prev.LastLost || cur.LastLost.Reason == "" {
		return "", nil, false
	}
	data, err := marshalJSON(api.Lost{
		Reason:       string(cur.LastLost.Reason),
		At:           api.Time{Time: cur.LastLost.At},
		FencingToken: cur.LastLost.FencingToken,
		Holder:       cur.Holder,
	})
	return "lost", data, err == nil
}

// waitQuery reads ?wait=&revision= and answers 400 if it cannot.
func waitQuery(w http.ResponseWriter, r *http.Request) (leaderQuery, bool) {
	if r.URL.RawQuery == "" {
		return leaderQuery{}, true
	}
	q, err := parseLeaderQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return q, false
	}
	return q, true
}

type leaderQuery struct {
	wait        time.Duration
	revision    uint64
	hasRevision bool
}

func parseLeaderQuery(v url.Values) (leaderQuery, error) {
	var q leaderQuery
	for key := range v {
		if key != "wait" && key != "revision" {
			return q, fmt.Errorf("unknown query parameter %q (known: wait, revision)", key)
		}
		if len(v[key]) > 1 {
			return q, fmt.Errorf("query parameter %q given more than once", key)
		}
	}
	if v.Has("wait") {
		s := v.Get("wait")
		d, err := time.ParseDuration(s)
		if err != nil {
			return q, fmt.Errorf("invalid wait %q: want a duration such as 30s", s)
		}
		if d < 0 {
			return q, fmt.Errorf("invalid wait %q: must not be negative", s)
		}
		q.wait = min(d, maxWait)
	}
	if v.Has("revision") {
		s := v.Get("revision")
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return q, fmt.Errorf("invalid revision %q: want a non-negative integer", s)
		}
		q.revision, q.hasRevision = n, true
	}
	return q, nil
}

// events streams the state as server-sent events (event: leader).
func (a *leaderAPI) events(w http.ResponseWriter, r *http.Request) {
	stream(w, r, a.keepAlive, a.leaderSource())
}

// compat answers GET / (and /health) in the format of the retired
// leader-elector image: 200 and the holder's name, on leader and follower
// alike, "" while no one holds the Lease.
func (a *leaderAPI) compat(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET "+r.URL.Path+" takes no query parameters")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"name": a.el.Snapshot().Holder})
}

// compatIsLeader answers GET /isLeader as the retired image did: 200 and
// whether this pod leads. The old image compared the holder with its
// hostname; this is the time-bounded isLeader of GET /leader.
func (a *leaderAPI) compatIsLeader(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET /isLeader takes no query parameters")
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"isLeader": a.el.Snapshot().IsLeader})
}

// releaseAnswerTimeout bounds how long POST /release waits for the Lease to
// be cleared: well within the server's WriteTimeout.
const releaseAnswerTimeout = 10 * time.Second

// release answers POST /release.
func (a *leaderAPI) release(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "POST /release takes no query parameters")
		return
	}
	// The claim is given up at once; clearing the Lease can take up to the
	// Lease client's timeout (half the renew deadline) and more with a hung
	// API server. The client gets an answer before the server's write
	// timeout would cut it off.
	ctx, cancel := context.WithTimeout(r.Context(), releaseAnswerTimeout)
	defer cancel()
	state, err := a.el.Release(ctx)
	switch {
	case errors.Is(err, election.ErrNotLeader):
		// Releasing what one does not hold is a no-op, not an error (the
		// release() of a Lease API).
		writeJSON(w, http.StatusOK, api.Release{Leader: leaderJSON(state), Released: false})
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("stopped leading, but clearing the Lease did not finish within %v (it goes on, or the Lease expires on its own)", releaseAnswerTimeout))
	case err != nil:
		// Leadership has been given up locally; only clearing the Lease
		// failed, so the others take over when it expires.
		writeError(w, http.StatusBadGateway, fmt.Sprintf("stopped leading, but could not clear the Lease (it expires on its own): %v", err))
	default:
		writeJSON(w, http.StatusOK, api.Release{Leader: leaderJSON(state), Released: true})
	}
}
