package main

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// monitor checks, from every answer the pollers get, the safety invariants
// of the e2e suite's monitor (test/e2e/monitor_test.go), incrementally so
// that a long run keeps no history of answers:
//   - no two candidates' claims provably overlap: a claim runs from the
//     leaderSince a candidate reports until at least the moment its last
//     "isLeader: true" request was sent; if two such intervals of different
//     candidates intersect, both led at once;
//   - (leader-elector) an "isLeader: true" answer carries a validUntil later
//     than the moment the request was sent;
//   - (leader-elector) fencing tokens only grow, across claims in order and
//     as seen by each candidate.
type monitor struct {
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

// monitorReport is the outcome of a monitored run.
type monitorReport struct {
	observations int
	claims       int
	violations   []string
	more         int
}

func (r monitorReport) count() int { return len(r.violations) + r.more }

const keptViolations = 20

func newMonitor(validity bool) *monitor {
	return &monitor{validity: validity, claims: map[string]*claim{}, lastToken: map[string]int64{}}
}

func (m *monitor) violate(format string, args ...any) {
	if len(m.violations) < keptViolations {
		m.violations = append(m.violations, fmt.Sprintf(format, args...))
		return
	}
	m.more++
}

func (m *monitor) record(o observation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.observations++
	s := o.state
	if m.validity {
		if prev, ok := m.lastToken[o.who]; ok && s.FencingToken < prev {
			m.violate("%s saw the fencing token go back from %d to %d (request sent %s)", o.who, prev, s.FencingToken, stamp(o.sent))
		}
		m.lastToken[o.who] = s.FencingToken
	}
	if !s.IsLeader {
		return
	}
	if m.validity && (s.ValidUntil == nil || !s.ValidUntil.After(o.sent)) {
		m.violate("%s claimed leadership past its validity: request sent %s, validUntil %v", o.who, stamp(o.sent), s.ValidUntil)
	}
	if s.LeaderSince == nil {
		m.violate("%s answered isLeader without leaderSince (request sent %s)", o.who, stamp(o.sent))
		return
	}
	key := o.who + "@" + s.LeaderSince.Format(time.RFC3339Nano)
	c, ok := m.claims[key]
	if !ok {
		c = &claim{who: o.who, since: *s.LeaderSince, token: s.FencingToken}
		m.claims[key] = c
	}
	if o.sent.After(c.lastSent) {
		c.lastSent = o.sent
	}
}

// check compares all claims seen so far; call it once, at the end.
func (m *monitor) check() monitorReport {
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
					a.who, stamp(a.since), stamp(a.lastSent), b.who, stamp(b.since), stamp(b.lastSent), end.Sub(start))
			}
			// A candidate that wins its own Lease back continues its term.
			if m.validity && (b.token < a.token || (a.who != b.who && b.token == a.token)) {
				m.violate("fencing token did not grow: %s had %d from %s, then %s had %d from %s", a.who, a.token, stamp(a.since), b.who, b.token, stamp(b.since))
			}
		}
	}
	if m.observations == 0 {
		m.violate("the monitor observed nothing")
	}
	return monitorReport{
		observations: m.observations,
		claims:       len(claims),
		violations:   append([]string(nil), m.violations...),
		more:         m.more,
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

func stamp(t time.Time) string { return t.Format("15:04:05.000000") }
