package apitest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// The wire format of the sidecar (package httpapi): its routing, error
// answers, JSON encoding and query parameters. httpapi's drift test
// compares what this file writes with what the real handler writes.

// routes maps exact paths to per-method handlers; a path ending in "/"
// also serves the paths below it, as the sidecar's router does.
type routes map[string]map[string]http.HandlerFunc

func (s *Sidecar) routes() http.Handler {
	notLeaderMode := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, r.URL.Path+" is not served in partition mode (--partitions); use GET /partitions")
	}
	rt := routes{
		"/leader":  {http.MethodGet: s.getLeader},
		"/events":  {http.MethodGet: s.events},
		"/release": {http.MethodPost: s.release},
		"/acquire": {http.MethodPost: s.acquire},
	}
	if s.cfg.Partitions > 0 {
		rt = routes{
			"/partitions":  {http.MethodGet: s.getPartitions},
			"/partitions/": {http.MethodPost: s.partitionAction, http.MethodPut: s.partitionAction},
			"/events":      {http.MethodGet: s.events},
			"/":            {http.MethodGet: notLeaderMode},
			"/leader":      {http.MethodGet: notLeaderMode},
			"/release":     {http.MethodPost: notLeaderMode},
		}
	}
	return s.recording(rt)
}

func (rt routes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	methods, ok := rt[r.URL.Path]
	for i := len(r.URL.Path) - 2; !ok && i > 0; i-- {
		if r.URL.Path[i] == '/' {
			methods, ok = rt[r.URL.Path[:i+1]]
		}
	}
	if !ok {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path)
		return
	}
	h, ok := methods[r.Method]
	if !ok {
		allowed := make([]string, 0, len(methods))
		for m := range methods {
			allowed = append(allowed, m)
		}
		sort.Strings(allowed)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; allowed: "+strings.Join(allowed, ", "))
		return
	}
	if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
		writeError(w, http.StatusBadRequest, "malformed query string: "+err.Error())
		return
	}
	h(w, r)
}

// maxRecordedBody bounds the body a Call keeps.
const maxRecordedBody = 64 << 10

// recording records every request as a Call, with its answer's status.
func (s *Sidecar) recording(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxRecordedBody))
		r.Body = io.NopCloser(bytes.NewReader(body))
		query, _ := url.ParseQuery(r.URL.RawQuery)
		c := &Call{Method: r.Method, Path: r.URL.Path, Query: query, Body: string(body)}
		s.callsMu.Lock()
		s.calls = append(s.calls, c)
		s.callsMu.Unlock()
		s.mu.Lock()
		s.expire() // claims that ran out end before the app is answered
		s.mu.Unlock()
		next.ServeHTTP(&statusWriter{ResponseWriter: w, s: s, call: c}, r)
	})
}

// statusWriter notes the answer's status in its Call.
type statusWriter struct {
	http.ResponseWriter
	s    *Sidecar
	call *Call
}

func (w *statusWriter) WriteHeader(status int) {
	w.s.callsMu.Lock()
	w.call.Status = status
	w.s.callsMu.Unlock()
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// marshalJSON encodes as the sidecar does: no HTML escaping, no newline.
func marshalJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return []byte(`{"error":"could not encode the response"}`)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(marshalJSON(v), '\n'))
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, &api.Error{Message: msg})
}

// writeRefused answers 409 with a reason (term-changed, not-owned, …).
func writeRefused(w http.ResponseWriter, reason, msg string) {
	writeJSON(w, http.StatusConflict, &api.Error{Message: msg, Reason: reason})
}

// maxWait bounds ?wait=, as the sidecar does.
const maxWait = 5 * time.Minute

// waitQuery is ?wait=&revision= of a long-poll.
type waitQuery struct {
	wait        time.Duration
	revision    uint64
	hasRevision bool
}

func parseWaitQuery(v url.Values) (waitQuery, error) {
	var q waitQuery
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
		switch {
		case err != nil:
			return q, fmt.Errorf("invalid wait %q: want a duration such as 30s", s)
		case d < 0:
			return q, fmt.Errorf("invalid wait %q: must not be negative", s)
		case d > maxWait:
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

// termParam is ?fencingToken=; anyTerm stands for its absence.
const (
	termParam = "fencingToken"
	anyTerm   = int64(-1)
)

// parseTerm reads ?fencingToken= and refuses every other parameter.
func parseTerm(v url.Values, what string) (int64, error) {
	for key := range v {
		if key != termParam {
			return 0, fmt.Errorf("unknown query parameter %q of %s (known: %s)", key, what, termParam)
		}
	}
	if !v.Has(termParam) {
		return anyTerm, nil
	}
	if len(v[termParam]) > 1 {
		return 0, fmt.Errorf("query parameter %q given more than once", termParam)
	}
	return parseToken(v.Get(termParam))
}

// canonicalNumber is a non-negative number in canonical decimal.
var canonicalNumber = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)

// parseToken reads a fencing token in canonical decimal within int32.
func parseToken(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if !canonicalNumber.MatchString(s) || err != nil || n > math.MaxInt32 {
		if len(s) > 32 {
			s = strings.ToValidUTF8(s[:32], "") + "…"
		}
		return 0, fmt.Errorf("invalid %s %q: want the term's fencing token, a whole number from 0 to %d in canonical decimal", termParam, s, math.MaxInt32)
	}
	return n, nil
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
