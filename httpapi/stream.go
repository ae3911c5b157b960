package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
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
	// chunks, if set, shares the events of the last change between streams.
	chunks *eventChunks
}

// eventChunks keeps the text of the last change's events: every stream that
// was told the same revision sends the same bytes for the next, so with
// 1 000 streams a change is formatted once, not 1 000 times, on the path a
// handover takes.
type eventChunks struct{ last atomic.Pointer[eventChunk] }

type eventChunk struct {
	// from is the revision the stream was told last (first: none).
	from, to uint64
	first    bool
	text     string
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
// per change.
//
// A stream leaves net/http once its request is read: the handler takes the
// connection over (Hijack), writes the response head itself and hands the
// connection to a goroutine of its own, then returns. Served by net/http, an
// open stream kept its connection's goroutine with the stack of the whole
// handler chain, a second goroutine that reads ahead to notice a client
// going away, and the connection's read and write buffers: about 43 KiB a
// stream, measured (docs/performance.md). Here it keeps one goroutine with
// a shallow stack, the connection and a timer. Its body ends when the
// connection closes (no chunked encoding: "Connection: close"), which
// every SSE client reads. What it gives up: a client that goes away is
// noticed at the next write (an event or a keep-alive), not at once.
//
// Why keep it, for a localhost API whose app usually opens a few streams:
// nothing bounds how many the app opens (one per worker is common), and the
// sidecar runs under a 64 MiB limit in the shipped manifests. Measured with
// 1,000 streams (docs/performance.md): 39.5–47.3 MiB served by net/http,
// 19.3–19.9 MiB taken over. At ten streams the saving (~0.3 MiB) would not
// pay for the non-standard handling; at hundreds it keeps the sidecar
// clear of its limit.
//
// Each stream only reads the state, so a slow client delays no one but
// itself; a write blocked for longer than writeGrace ends the stream.
func stream[S any](w http.ResponseWriter, r *http.Request, keepAliveEvery time.Duration, src watchable[S]) {
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "GET "+r.URL.Path+" takes no query parameters")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Only an HTTP/2 connection cannot be taken over, and the API
		// serves HTTP/1.1 only.
		writeError(w, http.StatusInternalServerError, "event streams need an HTTP/1.1 connection: "+err.Error())
		return
	}
	head := w.Header().Clone()
	head.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	head.Set("Connection", "close")
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\n")
	_ = head.Write(&b)
	b.WriteString("\r\n")
	s := &sseStream[S]{
		conn:      conn,
		src:       src,
		keepAlive: keepAliveEvery,
		logger:    klog.FromContext(r.Context()),
	}
	group := streamGroupOf(r.Context())
	if group != nil {
		if !group.start() {
			_ = conn.Close()
			return
		}
		s.shutdown = group.shutdown
	}
	// The server's deadlines for the request stay on the connection.
	_ = conn.SetDeadline(time.Time{})
	go func() {
		if group != nil {
			defer group.done()
		}
		s.run(b.String())
	}()
}

// sseStream is one event stream on a connection taken over from net/http.
type sseStream[S any] struct {
	conn      net.Conn
	src       watchable[S]
	keepAlive time.Duration
	// shutdown is closed when the server shuts down (nil: never).
	shutdown <-chan struct{}
	logger   klog.Logger

	sent  uint64
	prev  S
	first bool
}

// run writes head, then the events, until the client goes away or the
// server shuts down; it closes the connection.
func (s *sseStream[S]) run(head string) {
	defer s.conn.Close()
	keepAlive := time.NewTicker(s.keepAlive)
	defer keepAlive.Stop()
	s.first = true
	pending := head
	for {
		state, changed := s.src.watch()
		chunk, err := s.eventsFor(state)
		if err == nil && pending+chunk != "" {
			err = s.write(pending + chunk)
		}
		if err != nil {
			s.logger.V(4).Info("SSE client gone", "err", err)
			return
		}
		pending = ""
		select {
		case <-changed:
		case <-keepAlive.C:
			pending = ": keep-alive\n\n"
		case <-s.shutdown:
			// The server stops after the election: its last state (not
			// leader) goes out before the stream ends.
			state, _ = s.src.watch()
			if chunk, err := s.eventsFor(state); err == nil && chunk != "" {
				_ = s.write(chunk)
			}
			return
		}
	}
}

// eventsFor returns the events that tell the client of state ("" if it has
// been sent), and records it as sent.
func (s *sseStream[S]) eventsFor(state S) (string, error) {
	rev := s.src.revision(state)
	if !s.first && rev == s.sent {
		return "", nil
	}
	if s.src.chunks != nil {
		if c := s.src.chunks.last.Load(); c != nil && c.to == rev && c.first == s.first && (c.first || c.from == s.sent) {
			s.sent, s.prev, s.first = rev, state, false
			return c.text, nil
		}
	}
	from, first := s.sent, s.first
	var chunk string
	if s.src.before != nil && !s.first {
		if event, data, ok := s.src.before(s.prev, state); ok {
			chunk = fmt.Sprintf("event: %s\ndata: %s\n\n", event, data)
		}
	}
	body, err := s.src.encode(state)
	if err != nil {
		return "", err
	}
	chunk += fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", rev, s.src.event, body)
	if s.src.chunks != nil {
		s.src.chunks.last.Store(&eventChunk{from: from, to: rev, first: first, text: chunk})
	}
	s.sent, s.prev, s.first = rev, state, false
	return chunk, nil
}

func (s *sseStream[S]) write(chunk string) error {
	if err := s.conn.SetWriteDeadline(time.Now().Add(writeGrace)); err != nil {
		return err
	}
	_, err := io.WriteString(s.conn, chunk)
	return err
}
