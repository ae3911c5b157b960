// Package invariant checks the safety invariants of leader election from
// the answers candidates give to GET /leader. The e2e suite and the
// benchmarks both use it, so "no split brain" means the same in both.
package invariant

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Checker checks, from every answer a poller gets, these invariants,
// incrementally so that a long run keeps no history of answers:
//   - no two candidates' claims provably overlap: a claim runs from the
//     leaderSince a candidate reports until at least the moment its last
//     "isLeader: true" request was sent; if two such intervals of different
//     candidates intersect, both led at once;
//   - (leader-elector) an "isLeader: true" answer carries a validUntil later
//     than the moment the request was sent;
//   - (leader-elector) fencing tokens only grow, across claims in order and
//     as seen by each candidate.
type Checker struct {
	// validity: the answers carry validUntil and fencingToken.
	validity bool

	mu           sync.Mutex
	observations int
	claims       map[string]*claim
	lastToken    map[string]int64
	violations   []string
	// more counts violations beyond those kept in violations.
	more int
}

// claim is one continuous claim of leadership by one candidate.
type claim struct {
	who      string
	since    time.Time
	lastSent time.Time
	token    int64
}

// Answer is one answer to GET /leader, with when its request was sent.
// LeaderSince and ValidUntil are zero when the answer has none.
type Answer struct {
	Who          string
	Sent         time.Time
	IsLeader     bool
	FencingToken int64
	LeaderSince  time.Time
	ValidUntil   time.Time
}

// LeaderAnswer is the answer l that who gave to a request sent at sent.
func LeaderAnswer(who string, sent time.Time, l api.Leader) Answer {
	return Answer{Who: who, Sent: sent, IsLeader: l.IsLeader, FencingToken: l.FencingToken, LeaderSince: l.LeaderSince.Time, ValidUntil: l.ValidUntil.Time}
}

// Report is the outcome of a checked run.
type Report struct {
	Observations int
	Claims       int
	Violations   []string
	// More counts violations beyond those kept in Violations.
	More int
}

// Count is the number of violations.
func (r Report) Count() int { return len(r.Violations) + r.More }

const keptViolations = 20

// New returns a Checker. validity: the answers carry validUntil and a
// fencing token whose rules are checked too (leader-elector); plain
// client-go answers only isLeader and leaderSince.
func New(validity bool) *Checker {
	return &Checker{validity: validity, claims: map[string]*claim{}, lastToken: map[string]int64{}}
}

func (m *Checker) violate(format string, args ...any) {
	if len(m.violations) < keptViolations {
		m.violations = append(m.violations, fmt.Sprintf(format, args...))
		return
	}
	m.more++
}

// Record checks one answer.
func (m *Checker) Record(s Answer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observations++
	if m.validity {
		if prev, ok := m.lastToken[s.Who]; ok && s.FencingToken < prev {
			m.violate("%s saw the fencing token go back from %d to %d (request sent %s)", s.Who, prev, s.FencingToken, Stamp(s.Sent))
		}
		m.lastToken[s.Who] = s.FencingToken
	}
	if !s.IsLeader {
		return
	}
	if m.validity && (s.ValidUntil.IsZero() || !s.ValidUntil.After(s.Sent)) {
		m.violate("%s claimed leadership past its validity: request sent %s, validUntil %v", s.Who, Stamp(s.Sent), s.ValidUntil)
	}
	if s.LeaderSince.IsZero() {
		m.violate("%s answered isLeader without leaderSince (request sent %s)", s.Who, Stamp(s.Sent))
		return
	}
	key := s.Who + "@" + s.LeaderSince.Format(time.RFC3339Nano)
	c, ok := m.claims[key]
	if !ok {
		c = &claim{who: s.Who, since: s.LeaderSince, token: s.FencingToken}
		m.claims[key] = c
	}
	if s.Sent.After(c.lastSent) {
		c.lastSent = s.Sent
	}
}

// Check compares all claims recorded so far; call it once, at the end.
func (m *Checker) Check() Report {
	m.mu.Lock()
	defer m.mu.Unlock()
	claims := make([]claim, 0, len(m.claims))
	for _, c := range m.claims {
		claims = append(claims, *c)
	}
	sort.Slice(claims, func(i, j int) bool { return claims[i].since.Before(claims[j].since) })
	for i, a := range claims {
		for _, b := range claims[i+1:] {
			if start, end := later(a.since, b.since), earlier(a.lastSent, b.lastSent); a.who != b.who && start.Before(end) {
				m.violate("split brain: %s (leader since %s, still claimed at %s) and %s (leader since %s, still claimed at %s) overlap by %v",
					a.who, Stamp(a.since), Stamp(a.lastSent), b.who, Stamp(b.since), Stamp(b.lastSent), end.Sub(start))
			}
			// Every claim is a term of its own, with a larger token: also
			// one of a candidate that wins its own Lease back.
			if m.validity && b.token <= a.token {
				m.violate("fencing token did not grow: %s had %d from %s, then %s had %d from %s", a.who, a.token, Stamp(a.since), b.who, b.token, Stamp(b.since))
			}
		}
	}
	if m.observations == 0 {
		m.violate("the monitor observed nothing")
	}
	return Report{
		Observations: m.observations,
		Claims:       len(claims),
		Violations:   append([]string(nil), m.violations...),
		More:         m.more,
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Stamp formats a time as the violations do.
func Stamp(t time.Time) string { return t.Format("15:04:05.000000") }
