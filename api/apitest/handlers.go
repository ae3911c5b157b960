package apitest

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// getLeader answers GET /leader, optionally as a long-poll; with "Accept:
// text/plain", the holder's identity and a newline.
func (s *Sidecar) getLeader(w http.ResponseWriter, r *http.Request) {
	q, err := parseWaitQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.wait > 0 {
		s.waitFor(r, q, func() uint64 { return s.leader.revision })
	}
	s.mu.Lock()
	l := s.answer()
	s.mu.Unlock()
	if strings.TrimSpace(r.Header.Get("Accept")) == "text/plain" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, l.Holder)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// release answers POST /release[?fencingToken=].
func (s *Sidecar) release(w http.ResponseWriter, r *http.Request) {
	token, err := parseTerm(r.URL.Query(), "POST /release")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	l := &s.leader
	switch {
	case !l.isLeader:
		writeJSON(w, http.StatusOK, api.Release{Leader: s.answer(), Released: false})
	case token != anyTerm && token != l.fencingToken:
		writeRefused(w, api.ReasonTermChanged, fmt.Sprintf("this pod leads in another term than the one given (current %d, given %d)", l.fencingToken, token))
	default:
		s.loseLocked(api.ChangeReleased, s.now())
		writeJSON(w, http.StatusOK, api.Release{Leader: s.answer(), Released: true})
	}
}

// acquire answers POST /acquire. A Lease no one holds is taken at once as
// the next term, valid for Config.AcquireValidFor; one another pod holds
// is not (acquired false), unless ?wait= sees it freed (SetHolder("", …))
// in time. Retries are not spaced out: the answer comes at once.
func (s *Sidecar) acquire(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	wait, err := parseAcquireQuery(v)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if v.Has(termParam) {
		known, err := parseToken(v.Get(termParam))
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		s.mu.Lock()
		s.expire()
		over, l := s.termOver(known), s.leader
		s.mu.Unlock()
		if !over {
			writeRefused(w, api.ReasonTermCurrent, fmt.Sprintf("term %d has not ended as far as this pod knows (the Lease's term is %d, holder %q): not campaigning", known, l.fencingToken, l.holder))
			return
		}
	}
	if s.cfg.Observer {
		writeError(w, http.StatusConflict, "this pod is an observer (--candidate=false): it never takes the Lease")
		return
	}
	if wait > 0 {
		// Waits while another pod holds the Lease ("revision" 1).
		s.waitFor(r, waitQuery{wait: wait, revision: 1, hasRevision: true}, func() uint64 {
			if s.leader.holder == "" || s.leader.isLeader {
				return 0
			}
			return 1
		})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	if s.leader.holder == "" {
		s.leadLocked(s.leader.fencingToken+1, s.cfg.AcquireValidFor)
	}
	writeJSON(w, http.StatusOK, api.Acquire{Leader: s.answer(), Acquired: s.leader.isLeader})
}

// The bounds of POST /acquire's query, as the sidecar has them.
const (
	maxAcquireRetries    = 100
	maxAcquireRetryDelay = time.Minute
	defaultRetryDelay    = 500 * time.Millisecond
)

// parseAcquireQuery checks ?retries=&retryDelay= or ?wait= as the sidecar
// does and returns the wait; ?fencingToken= is read by the handler.
func parseAcquireQuery(v url.Values) (time.Duration, error) {
	for key := range v {
		if key != "retries" && key != "retryDelay" && key != "wait" && key != termParam {
			return 0, fmt.Errorf("unknown query parameter %q (known: retries, retryDelay, wait, %s)", key, termParam)
		}
		if len(v[key]) > 1 {
			return 0, fmt.Errorf("query parameter %q given more than once", key)
		}
	}
	if v.Has("wait") && (v.Has("retries") || v.Has("retryDelay")) {
		return 0, errors.New("wait campaigns until this pod leads or the wait passes; it does not take retries or retryDelay")
	}
	attempts, delay := 1, defaultRetryDelay
	if v.Has("retries") {
		s := v.Get("retries")
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxAcquireRetries {
			return 0, fmt.Errorf("invalid retries %q: want a whole number of attempts from 1 to %d", s, maxAcquireRetries)
		}
		attempts = n
	}
	if v.Has("retryDelay") {
		s := v.Get("retryDelay")
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxAcquireRetryDelay {
			return 0, fmt.Errorf("invalid retryDelay %q: want a duration from 0s to %v, such as 500ms", s, maxAcquireRetryDelay)
		}
		delay = d
	}
	if !v.Has("wait") {
		if span := time.Duration(attempts-1) * delay; span > maxWait {
			return 0, fmt.Errorf("%d attempts %v apart take %v, more than the %v one call may take", attempts, delay, span, maxWait)
		}
		return 0, nil
	}
	s := v.Get("wait")
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxWait {
		return 0, fmt.Errorf("invalid wait %q: want a duration above 0s and at most %v, such as 30s", s, maxWait)
	}
	return d, nil
}

// waitFor blocks until revision (read with mu held) differs from the one
// asked for, the wait runs out, the client goes away or the fake closes.
func (s *Sidecar) waitFor(r *http.Request, q waitQuery, revision func() uint64) {
	timer := time.NewTimer(q.wait)
	defer timer.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	want := revision()
	if q.hasRevision {
		want = q.revision
	}
	for revision() == want {
		changed := s.changed
		s.mu.Unlock()
		over := false
		select {
		case <-changed:
		case <-timer.C:
			over = true
		case <-r.Context().Done():
			over = true
		case <-s.closed:
			over = true
		}
		s.mu.Lock()
		if over {
			return
		}
	}
}
