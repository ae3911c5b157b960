package httpapi

import (
	"fmt"
	"net/http"
	"time"

	"k8s.io/klog/v2"
)

// watchable is a state with a revision that a long-poll or an SSE stream
// follows: the election's (GET /leader) or the partition group's (GET
// /partitions).
type watchable[S any] struct {
	watch    func() (S, <-chan struct{})
	revision func(S) uint64
	// event names the SSE event; encode gives its data.
	event  string
	encode func(S) ([]byte, error)
	// before, if set, gives an event to send ahead of the state's own when
	// the state changed from prev to cur (GET /events' "lost"); ok false
	// when there is none.
	before func(prev, cur S) (event string, data []byte, ok bool)
}

// waitFor blocks until the revision differs from the one asked for, the
// wait runs out, or the client or server goes away; it then returns the
// current state. It waits on the state's change channel: nothing polls.
func waitFor[S any](w http.ResponseWriter, r *http.Request, q leaderQuery, src watchable[S]) S {
	// The server's WriteTimeout would cut a long-poll short; this one
	// response gets the time it asked for.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(q.wait + writeGrace))

	timer := time.NewTimer(q.wait)
	defer timer.Stop()
	state, changed := src.watch()
	want := src.revision(state)
	if q.hasRevision {
		want = q.revision
	}
	for src.revision(state) == want {
		select {
		case <-changed:
		case <-timer.C:
			state, _ = src.watch()
			return state
		case <-r.Context().Done():
			state, _ = src.watch()
			return state
		}
		state, changed = src.watch()
	}
	return state
}

// stream sends the state as server-sent events: one at connect time and one
// per change. Each stream runs on its own goroutine and only reads the
// state, so a slow client delays no one but itself; a write blocked for
// longer than writeGrace ends the stream.
func stream[S any](w http.ResponseWriter, r *http.Request, keepAliveEvery time.Duration, src watchable[S]) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET "+r.URL.Path+" takes no query parameters")
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	logger := klog.FromContext(r.Context())
	keepAlive := time.NewTicker(keepAliveEvery)
	defer keepAlive.Stop()

	var sent uint64
	var prev S
	first := true
	for {
		state, changed := src.watch()
		if rev := src.revision(state); first || rev != sent {
			var chunk string
			if src.before != nil && !first {
				if event, data, ok := src.before(prev, state); ok {
					chunk = fmt.Sprintf("event: %s\ndata: %s\n\n", event, data)
				}
			}
			body, err := src.encode(state)
			if err == nil {
				err = writeChunk(rc, w, chunk+fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", rev, src.event, body))
			}
			if err != nil {
				logger.V(4).Info("SSE client gone", "err", err)
				return
			}
			sent, prev, first = rev, state, false
		}
		select {
		case <-changed:
		case <-keepAlive.C:
			if err := writeChunk(rc, w, ": keep-alive\n\n"); err != nil {
				logger.V(4).Info("SSE client gone", "err", err)
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
