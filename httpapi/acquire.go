package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

const (
	// MaxAcquireRetries bounds ?retries= (and --acquire-retries).
	MaxAcquireRetries = 100
	// MaxAcquireRetryDelay bounds ?retryDelay= (and --acquire-retry-delay).
	MaxAcquireRetryDelay = time.Minute
	// maxAcquireCall bounds how long one POST /acquire may take, whatever
	// its query: as long as the longest long-poll.
	maxAcquireCall = maxWait
)

// acquireHandler answers POST /acquire: try to take the Lease, and say
// whether this pod leads afterwards.
func (a *leaderAPI) acquireHandler(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	opts, err := parseAcquireQuery(v, a.acquire)
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
		// Checked once, before the attempts: a term that has ended stays
		// ended (tokens only grow), so no attempt after this check can
		// find term known current again.
		if s := a.el.Snapshot(); !termOver(s, known) {
			writeJSON(w, http.StatusConflict, &api.Error{Reason: api.ReasonTermCurrent,
				Message: fmt.Sprintf("term %d has not ended as far as this pod knows (the Lease's term is %d, holder %q): not campaigning", known, s.FencingToken, s.Holder)})
			return
		}
	}
	// The server's WriteTimeout would cut a long call short; this one
	// response gets the time it may take.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(maxAcquireCall + writeGrace))
	ctx, cancel := context.WithTimeout(r.Context(), maxAcquireCall)
	defer cancel()
	state, acquired, err := a.el.Acquire(ctx, opts)
	switch {
	case errors.Is(err, leadership.ErrObserver):
		writeError(w, http.StatusConflict, err.Error())
		return
	case r.Context().Err() != nil:
		// The client has gone: no one reads an answer.
		return
	case err != nil && !errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, api.Acquire{Leader: a.answer(state), Acquired: acquired})
}

// termOver reports whether s shows that the term with the fencing token
// known has ended: a later term has begun, or the Lease is in that term
// and no one holds it (released, or not renewed for a lease duration). A
// term this pod still holds, even with its claim lapsed, has not ended; a
// token above every one this sidecar has seen names a term it cannot know
// to be over.
func termOver(s leadership.State, known int64) bool {
	return s.FencingToken > known || s.FencingToken == known && s.Holder == ""
}

// parseAcquireQuery reads ?retries=&retryDelay= or ?wait= over the
// defaults; it lets ?fencingToken= through (the handler reads it).
func parseAcquireQuery(v url.Values, defaults leadership.AcquireOptions) (leadership.AcquireOptions, error) {
	opts := defaults
	for key := range v {
		if key != "retries" && key != "retryDelay" && key != "wait" && key != termParam {
			return opts, fmt.Errorf("unknown query parameter %q (known: retries, retryDelay, wait, %s)", key, termParam)
		}
		if len(v[key]) > 1 {
			return opts, fmt.Errorf("query parameter %q given more than once", key)
		}
	}
	if v.Has("wait") && (v.Has("retries") || v.Has("retryDelay")) {
		return opts, errors.New("wait campaigns until this pod leads or the wait passes; it does not take retries or retryDelay")
	}
	if v.Has("retries") {
		s := v.Get("retries")
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxAcquireRetries {
			return opts, fmt.Errorf("invalid retries %q: want a whole number of attempts from 1 to %d", s, MaxAcquireRetries)
		}
		opts.Attempts = n
	}
	if v.Has("retryDelay") {
		s := v.Get("retryDelay")
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > MaxAcquireRetryDelay {
			return opts, fmt.Errorf("invalid retryDelay %q: want a duration from 0s to %v, such as 500ms", s, MaxAcquireRetryDelay)
		}
		opts.RetryDelay = d
	}
	if v.Has("wait") {
		s := v.Get("wait")
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > maxWait {
			return opts, fmt.Errorf("invalid wait %q: want a duration above 0s and at most %v, such as 30s", s, maxWait)
		}
		opts.Wait = d
	}
	if opts.Wait == 0 {
		if err := CheckAcquireSpan(opts); err != nil {
			return opts, err
		}
	}
	return opts, nil
}

// CheckAcquireSpan refuses attempts whose delays alone would outlast the
// longest call (the long-poll's bound): such a call would be cut short.
func CheckAcquireSpan(opts leadership.AcquireOptions) error {
	if span := time.Duration(max(opts.Attempts-1, 0)) * opts.RetryDelay; span > maxAcquireCall {
		return fmt.Errorf("%d attempts %v apart take %v, more than the %v one call may take", opts.Attempts, opts.RetryDelay, span, maxAcquireCall)
	}
	return nil
}
