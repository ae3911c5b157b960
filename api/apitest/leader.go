package apitest

import (
	"fmt"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// leaderState is what GET /leader shows.
type leaderState struct {
	holder                  string
	isLeader                bool
	fencingToken            int64
	renewTime               time.Time
	leaderSince, validUntil time.Time
	degraded                string
	successor               string
	revision                uint64
	lastChange              *api.Change
	// lost is the end of this pod's last term; lostSeq counts them, so
	// that a stream tells each one once ("event: lost").
	lost    *api.Change
	lostSeq int
}

// Lead makes this pod the leader in the term token, its claim valid for
// validFor from now: GET /leader answers isLeader with that token and
// validUntil, and the streams get the new state. Called again with the
// same token while leading, it renews the claim (a new validUntil, no new
// revision, as a renewal). The claim runs out at validUntil, on
// Config.Now's clock (lastChange renew-deadline), unless renewed: give a
// validFor longer than the test for a pod that keeps leading. A token
// below the current one fails the test: tokens never go back.
func (s *Sidecar) Lead(token int64, validFor time.Duration) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock() // also when fail ends the test's goroutine
	if err := s.leadLocked(token, validFor); err != "" {
		s.fail("%s", err)
	}
}

// leadLocked is Lead with mu held; it returns what is wrong, or "".
func (s *Sidecar) leadLocked(token int64, validFor time.Duration) string {
	l := &s.leader
	switch {
	case validFor <= 0:
		return "Lead needs a validFor above 0"
	case token < l.fencingToken:
		return fmt.Sprintf("Lead(%d): the fencing token was already %d; tokens never go back", token, l.fencingToken)
	case l.isLeader && token != l.fencingToken:
		return fmt.Sprintf("Lead(%d) while leading in term %d: end that term first (Lose or SetHolder)", token, l.fencingToken)
	}
	now := s.now()
	l.renewTime, l.validUntil = now, now.Add(validFor)
	if !l.isLeader {
		l.holder, l.isLeader, l.fencingToken, l.leaderSince = s.cfg.Identity, true, token, now
		l.lastChange = &api.Change{IsLeader: true, Reason: api.ChangeAcquired, At: api.Time{Time: now}, FencingToken: token}
		s.bump(&l.revision)
	}
	s.scheduleExpiry(s.nextDeadline())
	return ""
}

// Lose ends this pod's term with reason, one of api.ChangeReasons but
// acquired: streams get "event: lost" and then the new state. The Lease
// names no holder afterwards, except after renew-deadline, when it still
// names this pod (its lease has not expired yet). For a takeover by
// another pod use SetHolder. It does nothing on a pod that does not lead.
func (s *Sidecar) Lose(reason string) {
	if s.tb != nil {
		s.tb.Helper()
	}
	if !knownReason(reason) || reason == api.ChangeAcquired {
		s.fail("Lose(%q): want one of api.ChangeReasons() but acquired", reason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseLocked(reason, s.now())
}

// loseLocked ends this pod's term with reason at at. Called with mu held.
func (s *Sidecar) loseLocked(reason string, at time.Time) {
	l := &s.leader
	if !l.isLeader {
		return
	}
	if reason != api.ChangeRenewDeadline {
		l.holder = ""
	}
	l.isLeader, l.leaderSince, l.validUntil = false, time.Time{}, time.Time{}
	l.lastChange = &api.Change{IsLeader: false, Reason: reason, At: api.Time{Time: at}, FencingToken: l.fencingToken}
	l.lost = l.lastChange
	l.lostSeq++
	s.bump(&l.revision)
}

// SetHolder shows holder leading in the term token (holder "" : no one
// holds the Lease, token kept). If this pod led, its term ends as
// taken-over. A token below the current one fails the test.
func (s *Sidecar) SetHolder(holder string, token int64) {
	if s.tb != nil {
		s.tb.Helper()
	}
	s.mu.Lock()
	defer s.mu.Unlock() // also when fail ends the test's goroutine
	l := &s.leader
	if holder == "" {
		token = l.fencingToken
	}
	if token < l.fencingToken {
		s.fail("SetHolder(%q, %d): the fencing token was already %d; tokens never go back", holder, token, l.fencingToken)
	}
	if holder == s.cfg.Identity {
		s.fail("SetHolder(%q): that is this pod; use Lead", holder)
	}
	if l.holder == holder && l.fencingToken == token {
		return
	}
	if l.isLeader {
		s.loseLocked(api.ChangeTakenOver, s.now())
		// loseLocked bumped the revision; the new holder is part of it.
	} else {
		s.bump(&l.revision)
	}
	l.holder, l.fencingToken = holder, token
	if holder != "" {
		l.renewTime = s.now()
	}
	s.scheduleExpiry(s.nextDeadline())
}

// SetDegraded marks this pod degraded with reason ("" clears it), as
// health gating does when the app is unhealthy and no one can take over
// (in partition mode: when every member's app is unhealthy).
func (s *Sidecar) SetDegraded(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.Partitions > 0 {
		if s.parts.degraded != reason {
			s.parts.degraded = reason
			s.bump(&s.parts.revision)
		}
		return
	}
	if s.leader.degraded != reason {
		s.leader.degraded = reason
		s.bump(&s.leader.revision)
	}
}

// SetSuccessor sets the candidate this pod would hand over to if it
// released now ("" none): GET /leader shows it as successor while this
// pod leads. Like the sidecar's, it is no change of revision.
func (s *Sidecar) SetSuccessor(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leader.successor = name
}

// Leader returns the state GET /leader answers now (without validForMs).
func (s *Sidecar) Leader() api.Leader {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.expire()
	return s.leaderJSON()
}

// leaderJSON is the state as GET /leader writes it, without validForMs.
// Called with mu held.
func (s *Sidecar) leaderJSON() api.Leader {
	l := s.leader
	out := api.Leader{
		Lease:                api.Lease{Namespace: s.cfg.Namespace, Name: s.cfg.Name},
		Identity:             s.cfg.Identity,
		Holder:               l.holder,
		IsLeader:             l.isLeader,
		FencingToken:         l.fencingToken,
		LeaseDurationSeconds: s.cfg.LeaseDurationSeconds,
		RenewTime:            api.Time{Time: l.renewTime},
		LeaderSince:          api.Time{Time: l.leaderSince},
		ValidUntil:           api.Time{Time: l.validUntil},
		Revision:             l.revision,
		LastChange:           l.lastChange,
		Degraded:             l.degraded != "",
		DegradedReason:       l.degraded,
	}
	if l.isLeader {
		out.Successor = l.successor
	}
	return out
}

// answer is the state as an answer writes it: with validForMs while this
// pod leads. Called with mu held.
func (s *Sidecar) answer() api.Leader {
	s.expire()
	l := s.leaderJSON()
	if l.IsLeader {
		ms := max(s.leader.validUntil.Sub(s.now()), 0).Milliseconds()
		l.ValidForMs = &ms
	}
	return l
}

// termOver reports whether the term known has ended, as POST
// /acquire?fencingToken= checks it. Called with mu held.
func (s *Sidecar) termOver(known int64) bool {
	l := s.leader
	return l.fencingToken > known || l.fencingToken == known && l.holder == ""
}

func knownReason(r string) bool {
	for _, k := range api.ChangeReasons() {
		if r == k {
			return true
		}
	}
	return false
}
