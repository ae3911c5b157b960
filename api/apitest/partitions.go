package apitest

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leader-elector/leader-elector/api"
)

// partitionsState is what GET /partitions shows (partition mode).
type partitionsState struct {
	members  int
	list     []partitionState
	revision uint64
	// degraded is SetDegraded's reason ("" none).
	degraded string
}

type partitionState struct {
	owned             bool
	fencingToken      int64
	since, validUntil time.Time
	// renewTime is Own's last call: the claim's renewal.
	renewTime     time.Time
	draining      bool
	drainDeadline time.Time
	checkpoint    *api.Checkpoint
}

func newPartitionsState(n int) partitionsState {
	return partitionsState{members: 1, list: make([]partitionState, n), revision: 1}
}

// partition returns partition i for a control method, failing the test
// if the fake has none such. Called with mu held.
func (s *Sidecar) partition(what string, i int) *partitionState {
	if i < 0 || i >= len(s.parts.list) {
		s.fail("%s(%d): the fake has partitions 0..%d (Config.Partitions)", what, i, len(s.parts.list)-1)
	}
	return &s.parts.list[i]
}

// Own makes this pod own partition i in the term token, its claim valid
// for validFor from now; called again with the same token while owned, it
// renews the claim. The claim runs out at validUntil as Lead's does. A
// token below the partition's last one fails the test.
func (s *Sidecar) Own(i int, token int64, validFor time.Duration) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock() // also when fail ends the test's goroutine
	p := s.partition("Own", i)
	switch {
	case validFor <= 0:
		s.fail("Own(%d) needs a validFor above 0", i)
	case token < p.fencingToken:
		s.fail("Own(%d, %d): the partition's token was already %d; tokens never go back", i, token, p.fencingToken)
	case p.owned && token != p.fencingToken:
		s.fail("Own(%d, %d) while owning it in term %d: Disown it first", i, token, p.fencingToken)
	}
	now := s.now()
	p.validUntil, p.renewTime = now.Add(validFor), now
	if !p.owned {
		p.owned, p.fencingToken, p.since = true, token, now
		p.draining, p.drainDeadline = false, time.Time{}
		s.bump(&s.parts.revision)
	}
	s.scheduleExpiry(s.nextDeadline())
}

// Disown ends this pod's ownership of partition i (handed over, or
// taken): it leaves GET /partitions' owned list. Its checkpoint stays.
func (s *Sidecar) Disown(i int) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disownLocked(s.partition("Disown", i))
}

func (s *Sidecar) disownLocked(p *partitionState) {
	if !p.owned {
		return
	}
	p.owned, p.since, p.validUntil, p.draining, p.drainDeadline = false, time.Time{}, time.Time{}, false, time.Time{}
	s.bump(&s.parts.revision)
}

// Drain marks the owned partition i draining: the app is to checkpoint
// and release it within the given time (drainDeadline).
func (s *Sidecar) Drain(i int, within time.Duration) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.partition("Drain", i)
	if !p.owned {
		s.fail("Drain(%d): this pod does not own it (Own it first)", i)
	}
	p.draining, p.drainDeadline = true, s.now().Add(within)
	s.bump(&s.parts.revision)
}

// SetCheckpoint stores a checkpoint with partition i as holder wrote it in
// the term token (an earlier owner's, say): GET /partitions shows it
// while this pod owns i.
func (s *Sidecar) SetCheckpoint(i int, value, holder string, token int64) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.partition("SetCheckpoint", i).checkpoint = &api.Checkpoint{Value: value, Holder: holder, FencingToken: token, Time: api.Time{Time: s.now()}}
}

// Checkpoint returns the checkpoint stored with partition i, by the app
// (PUT /partitions/<i>/checkpoint) or SetCheckpoint; false if none.
func (s *Sidecar) Checkpoint(i int) (api.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.partition("Checkpoint", i).checkpoint
	if c == nil {
		return api.Checkpoint{}, false
	}
	return *c, true
}

// SetMembers sets how many live members the group has (1 at start), and
// with it the fair share.
func (s *Sidecar) SetMembers(n int) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < 1 {
		s.fail("SetMembers(%d): this pod is one of them", n)
	}
	if s.parts.members != n {
		s.parts.members = n
		s.bump(&s.parts.revision)
	}
}

// Partitions returns the state GET /partitions answers now (without
// validForMs).
func (s *Sidecar) Partitions() api.Partitions {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	return s.partitionsJSON()
}

// partitionsJSON is the state as GET /partitions writes it. Called with mu
// held.
func (s *Sidecar) partitionsJSON() api.Partitions {
	n, m := len(s.parts.list), s.parts.members
	owned := []api.OwnedPartition{}
	for i, p := range s.parts.list {
		if !p.owned {
			continue
		}
		owned = append(owned, api.OwnedPartition{Partition: i, FencingToken: p.fencingToken,
			Since: api.Time{Time: p.since}, ValidUntil: api.Time{Time: p.validUntil}, RenewTime: api.Time{Time: p.renewTime},
			Draining: p.draining, DrainDeadline: api.Time{Time: p.drainDeadline}, Checkpoint: p.checkpoint})
	}
	return api.Partitions{
		Lease:                api.Lease{Namespace: s.cfg.Namespace, Name: s.cfg.Name},
		Identity:             s.cfg.Identity,
		Partitions:           n,
		LeaseDurationSeconds: s.cfg.LeaseDurationSeconds,
		EffectivePartitions:  n,
		Members:              m,
		Member:               true,
		FairShare:            api.FairShare{Min: n / m, Max: (n + m - 1) / m},
		Owned:                owned,
		Revision:             s.parts.revision,
		Degraded:             s.parts.degraded != "",
		DegradedReason:       s.parts.degraded,
	}
}

// partitionsAnswer is the state as an answer writes it: with each owned
// partition's validForMs. Called with mu held.
func (s *Sidecar) partitionsAnswer() api.Partitions {
	s.expire()
	p := s.partitionsJSON()
	now := s.now()
	for k, o := range p.Owned {
		ms := max(o.ValidUntil.Sub(now), 0).Milliseconds()
		p.Owned[k].ValidForMs = &ms
	}
	return p
}

// expireParts ends the ownerships whose validUntil has passed. Called with
// mu held.
func (s *Sidecar) expireParts(now time.Time) {
	for i := range s.parts.list {
		if p := &s.parts.list[i]; p.owned && !now.Before(p.validUntil) {
			s.disownLocked(p)
		}
	}
}

// getPartitions answers GET /partitions, optionally as a long-poll.
func (s *Sidecar) getPartitions(w http.ResponseWriter, r *http.Request) {
	q, err := parseWaitQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.wait > 0 {
		s.waitFor(r, q, func() uint64 { return s.parts.revision })
	}
	s.mu.Lock()
	p := s.partitionsAnswer()
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, p)
}

// partitionAction answers POST /partitions/<i>/release and PUT
// /partitions/<i>/checkpoint, checking the path and query as the sidecar
// does.
func (s *Sidecar) partitionAction(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.EscapedPath(), "/partitions/")
	num, action, _ := strings.Cut(rest, "/")
	method, ok := map[string]string{"release": http.MethodPost, "checkpoint": http.MethodPut}[action]
	if !ok {
		writeError(w, http.StatusNotFound, "no such path: "+r.URL.Path+" (want POST /partitions/<i>/release or PUT /partitions/<i>/checkpoint)")
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path+"; allowed: "+method)
		return
	}
	token, err := parseTerm(r.URL.Query(), method+" /partitions/<i>/"+action)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	i, err := strconv.Atoi(num)
	if !canonicalNumber.MatchString(num) || err != nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such partition %q: want a number in canonical decimal (0, 1, 2, …)", num))
		return
	}
	if action == "checkpoint" {
		s.storeCheckpoint(w, r, i, token)
		return
	}
	s.releasePartition(w, i, token)
}

// ownedIn checks that this pod owns partition i in the term token, and
// answers 404 or 409 if it does not: termChanged is the message of a
// term refused. Called with mu held.
func (s *Sidecar) ownedIn(w http.ResponseWriter, i int, token int64, notOwnedReason string, termChanged func(current int64) string) (*partitionState, bool) {
	s.expire()
	if i >= len(s.parts.list) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such partition: %d (the group has partitions 0..%d)", i, len(s.parts.list)-1))
		return nil, false
	}
	p := &s.parts.list[i]
	switch {
	case !p.owned:
		writeRefused(w, notOwnedReason, fmt.Sprintf("this pod does not own the partition: %d", i))
		return nil, false
	case token != anyTerm && token != p.fencingToken:
		writeRefused(w, api.ReasonTermChanged, termChanged(p.fencingToken))
		return nil, false
	}
	return p, true
}

// releasePartition answers POST /partitions/<i>/release[?fencingToken=].
func (s *Sidecar) releasePartition(w http.ResponseWriter, i int, token int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.ownedIn(w, i, token, "", func(current int64) string {
		return fmt.Sprintf("partition %d: this pod leads in another term than the one given (current %d, given %d)", i, current, token)
	})
	if !ok {
		return
	}
	s.disownLocked(p)
	writeJSON(w, http.StatusOK, s.partitionsAnswer())
}

// storeCheckpoint answers PUT /partitions/<i>/checkpoint[?fencingToken=].
// Unlike the sidecar it has no rate limit (no 429).
func (s *Sidecar) storeCheckpoint(w http.ResponseWriter, r *http.Request, i int, token int64) {
	if r.ContentLength > api.MaxCheckpointBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a checkpoint is at most %d bytes, got %d", api.MaxCheckpointBytes, r.ContentLength))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, api.MaxCheckpointBytes+1))
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "could not read the body: "+err.Error())
		return
	case len(body) > api.MaxCheckpointBytes:
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a checkpoint is at most %d bytes, got more", api.MaxCheckpointBytes))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i < len(s.parts.list) && !utf8.Valid(body) {
		writeError(w, http.StatusBadRequest, "a checkpoint must be UTF-8 text (encode binary values, e.g. as base64)")
		return
	}
	p, ok := s.ownedIn(w, i, token, api.ReasonNotOwned, func(current int64) string {
		return fmt.Sprintf("checkpoint refused: partition %d: lease not annotated: the lease's term is not the one given (current %d, given %d)", i, current, token)
	})
	if !ok {
		return
	}
	c := api.Checkpoint{Value: string(body), Holder: s.cfg.Identity, FencingToken: p.fencingToken, Time: api.Time{Time: s.now().UTC().Truncate(time.Microsecond)}}
	p.checkpoint = &c
	writeJSON(w, http.StatusOK, api.CheckpointStored{Partition: i, Checkpoint: c})
}
