// Package httpapi serves the election state over HTTP: the application API
// (GET /leader, long-poll, SSE, POST /release) for the app on localhost, and
// the probe server (/readyz, /healthz, /metrics) for the kubelet and
// Prometheus. It reads the state through the Election interface and knows
// nothing of the Kubernetes API.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

// Election is what the HTTP servers need from the elector.
type Election interface {
	// Snapshot returns the current state.
	Snapshot() leadership.State
	// Watch returns the current state and a channel closed at its next change.
	Watch() (leadership.State, <-chan struct{})
	// ReleaseTerm makes the leader step down, only in the term token
	// (leadership.AnyTerm: whichever it leads in); leadership.ErrNotLeader if
	// it does not lead, leadership.ErrOtherTerm if it leads in another term.
	ReleaseTerm(ctx context.Context, token int64) (leadership.State, error)
	// Acquire tries to take the Lease and reports whether this pod leads;
	// leadership.ErrObserver on an observer.
	Acquire(ctx context.Context, opts leadership.AcquireOptions) (leadership.State, bool, error)
	// Candidate fails until the elector runs and has reached the API server.
	Candidate() error
	// Healthy fails when the elector is wedged.
	Healthy() error
}

const (
	// maxWait bounds ?wait= on every endpoint that takes one (GET /leader,
	// GET /partitions, POST /acquire); a longer wait is refused with 400,
	// not shortened, so that a caller never waits less than it asked for
	// without a word.
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
	Acquire leadership.AcquireOptions
	// Clock is what validForMs is measured on, against the state's
	// Deadline; the real clock if nil. It must be the clock the Election
	// measures its claims on: with the real one, both readings carry the
	// monotonic clock, so a step of the wall clock does not move the
	// answer.
	Clock clock.PassiveClock
	// ReleaseDrain is how much longer a graceful release may take before it
	// clears the Lease (the forwarding proxy's --proxy-drain): POST
	// /release waits for it too.
	ReleaseDrain time.Duration
}

// NewAPIHandler returns the application API handler.
func NewAPIHandler(el Election, opts APIOptions) http.Handler {
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = defaultKeepAlive
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	a := &leaderAPI{el: el, keepAlive: opts.KeepAlive, acquire: opts.Acquire, clock: opts.Clock, releaseDrain: opts.ReleaseDrain}
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
	acquire   leadership.AcquireOptions
	clock     clock.PassiveClock
	// releaseDrain: APIOptions.ReleaseDrain.
	releaseDrain time.Duration
	// encoded is the JSON of the last state served: most requests find the
	// state unchanged and reuse it.
	encoded atomic.Pointer[encodedState]
	// chunks are the SSE events of the last change, shared by the streams.
	chunks eventChunks
}

type encodedState struct {
	state leadership.State
	// body is the JSON without validForMs, with a trailing newline: an
	// event's, and an answer's once validForMs is put in at validForAt
	// (-1: not leading, the answer has none).
	body       []byte
	validForAt int
}

// encodeLeader returns the JSON of s, with a trailing newline, and where
// an answer's validForMs goes in it.
func (a *leaderAPI) encodeLeader(s leadership.State) (*encodedState, error) {
	if c := a.encoded.Load(); c != nil && c.state == s {
		return c, nil
	}
	l := leaderJSON(s)
	body, err := marshalJSON(l)
	if err != nil {
		return nil, err
	}
	c := &encodedState{state: s, body: append(body, '\n'), validForAt: -1}
	if s.IsLeader {
		// Where encoding/json puts the field. It cannot be found inside a
		// string: there a quote is escaped.
		var zero int64
		l.ValidForMs = &zero
		with, err := marshalJSON(l)
		if err != nil {
			return nil, err
		}
		at := bytes.Index(with, validForField)
		if at < 0 || !bytes.Equal(with[:at], body[:at]) || !bytes.Equal(with[at+len(validForField)+1:], body[at:]) {
			return nil, errors.New("validForMs is not where it was expected in the encoding")
		}
		c.validForAt = at
	}
	a.encoded.Store(c)
	return c, nil
}

// validForField is how validForMs begins in an answer; its value follows.
var validForField = []byte(`,"validForMs":`)

// leaderBody returns the JSON of s without validForMs, with a trailing
// newline: the data of events, which one encoding serves to every stream
// and which a stream may send well after the state was taken.
func (a *leaderAPI) leaderBody(s leadership.State) ([]byte, error) {
	c, err := a.encodeLeader(s)
	if err != nil {
		return nil, err
	}
	return c.body, nil
}

// answerBody returns the answer of GET /leader for s: its JSON with
// validForMs measured now, when the answer is written.
func (a *leaderAPI) answerBody(s leadership.State) ([]byte, error) {
	c, err := a.encodeLeader(s)
	if err != nil || c.validForAt < 0 {
		return c.body, err
	}
	body := make([]byte, 0, len(c.body)+len(validForField)+20)
	body = append(body, c.body[:c.validForAt]...)
	body = append(body, validForField...)
	body = strconv.AppendInt(body, a.validForMs(s), 10)
	return append(body, c.body[c.validForAt:]...), nil
}

// validForMs is what is left of the claim s shows, now, in whole
// milliseconds: s.Deadline carries the monotonic reading of the claim's
// end, so a step of the wall clock changes nothing.
func (a *leaderAPI) validForMs(s leadership.State) int64 {
	return max(s.Deadline.Sub(a.clock.Now()), 0).Milliseconds()
}

// answer is s as POST /acquire and POST /release answer it: with
// validForMs while this pod leads.
func (a *leaderAPI) answer(s leadership.State) api.Leader {
	l := leaderJSON(s)
	if s.IsLeader {
		ms := a.validForMs(s)
		l.ValidForMs = &ms
	}
	return l
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
	body, err := a.answerBody(state)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "could not encode the response")
		return
	}
	writeBody(w, http.StatusOK, body)
}

// leaderSource is the election state as long-polls and SSE follow it.
func (a *leaderAPI) leaderSource() watchable[leadership.State] {
	return watchable[leadership.State]{
		watch:    a.el.Watch,
		revision: func(s leadership.State) uint64 { return s.Revision },
		event:    "leader",
		// The body GET /leader serves, without its newline: encoded once
		// per state, not once per stream (1 000 streams, one encoding).
		encode: func(s leadership.State) ([]byte, error) {
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
func lostEvent(prev, cur leadership.State) (string, []byte, bool) {
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
		if d > maxWait {
			return q, fmt.Errorf("invalid wait %q: want a duration of at most %v, such as 30s", s, maxWait)
		}
		q.wait = d
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

// release answers POST /release[?fencingToken=].
func (a *leaderAPI) release(w http.ResponseWriter, r *http.Request) {
	token, err := parseTerm(r.URL.Query(), "POST /release")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// The claim is given up after the proxy's drain, if any; clearing the
	// Lease can take up to the Lease client's timeout (half the renew
	// deadline) and more with a hung API server. The client gets an answer
	// before this response's write deadline would cut it off.
	timeout := releaseAnswerTimeout + a.releaseDrain
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + writeGrace))
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	state, err := a.el.ReleaseTerm(ctx, token)
	switch {
	case errors.Is(err, leadership.ErrNotLeader):
		// Releasing what one does not hold is a no-op, not an error (the
		// release() of a Lease API), whatever term was named.
		writeJSON(w, http.StatusOK, api.Release{Leader: a.answer(state), Released: false})
	case errors.Is(err, leadership.ErrOtherTerm):
		writeTermChanged(w, err)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("stopped leading, but clearing the Lease did not finish within %v (it goes on, or the Lease expires on its own)", timeout))
	case err != nil:
		// Leadership has been given up locally; only clearing the Lease
		// failed, so the others take over when it expires.
		writeError(w, http.StatusBadGateway, fmt.Sprintf("stopped leading, but could not clear the Lease (it expires on its own): %v", err))
	default:
		writeJSON(w, http.StatusOK, api.Release{Leader: a.answer(state), Released: true})
	}
}
