package e2e

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// pollInterval is how often the monitor asks every candidate.
const pollInterval = 20 * time.Millisecond

// observation is one answer of GET /leader, with when it was asked and
// answered.
type observation struct {
	who      string
	sent     time.Time
	received time.Time
	state    leaderState
}

// monitor asks every candidate for its state, all the time, and checks the
// safety invariants over the whole run when the test ends:
//   - never two candidates whose claims provably overlap: candidate A claimed
//     from its leaderSince until at least the moment its last "isLeader: true"
//     request was sent, and the same for B; if both intervals overlap, both
//     led at once. (Comparing snapshots instead would mistake poll skew on a
//     busy machine for split brain.)
//   - an answer "isLeader: true" always comes with a validUntil later than the
//     request: nothing is claimed after its expiry.
//   - fencing tokens only grow: across claims in order, and as seen by each
//     candidate.
type monitor struct {
	t       testing.TB
	members func() []*candidate
	stop    chan struct{}
	wg      sync.WaitGroup

	mu   sync.Mutex
	seen map[*candidate]bool
	obs  []observation
}

func startMonitor(t testing.TB, members func() []*candidate) *monitor {
	m := &monitor{t: t, members: members, stop: make(chan struct{}), seen: map[*candidate]bool{}}
	m.wg.Add(1)
	go m.discover()
	t.Cleanup(func() {
		close(m.stop)
		m.wg.Wait()
		m.check()
	})
	return m
}

// discover starts a poller for every new member.
func (m *monitor) discover() {
	defer m.wg.Done()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		for _, c := range m.members() {
			m.mu.Lock()
			isNew := !m.seen[c]
			m.seen[c] = true
			m.mu.Unlock()
			if isNew {
				m.wg.Add(1)
				go m.poll(c)
			}
		}
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
	}
}

func (m *monitor) poll(c *candidate) {
	defer m.wg.Done()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		if c.running() {
			sent := time.Now()
			s, err := c.state()
			if err == nil {
				m.record(observation{who: c.name, sent: sent, received: time.Now(), state: s})
			}
		}
		select {
		case <-m.stop:
			return
		case <-c.done:
			return
		case <-tick.C:
		}
	}
}

func (m *monitor) record(o observation) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.obs = append(m.obs, o)
}

// leaderAnswers returns the "isLeader: true" answers to requests sent in
// [from, to].
func (m *monitor) leaderAnswers(from, to time.Time) []observation {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []observation
	for _, o := range m.obs {
		if o.state.IsLeader && !o.sent.Before(from) && !o.sent.After(to) {
			out = append(out, o)
		}
	}
	return out
}

// claim is one continuous claim of leadership by one candidate.
type claim struct {
	who   string
	since time.Time
	// lastSent is when the last request answered "isLeader: true" in this
	// claim was sent.
	lastSent time.Time
	token    int64
}

func (m *monitor) claims() []claim {
	m.mu.Lock()
	defer m.mu.Unlock()
	byKey := map[string]*claim{}
	for _, o := range m.obs {
		if !o.state.IsLeader || o.state.LeaderSince == nil {
			continue
		}
		key := fmt.Sprintf("%s@%s", o.who, o.state.LeaderSince.Format(time.RFC3339Nano))
		c, ok := byKey[key]
		if !ok {
			c = &claim{who: o.who, since: *o.state.LeaderSince, token: o.state.FencingToken}
			byKey[key] = c
		}
		if o.sent.After(c.lastSent) {
			c.lastSent = o.sent
		}
	}
	out := make([]claim, 0, len(byKey))
	for _, c := range byKey {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].since.Before(out[j].since) })
	return out
}

func (m *monitor) check() {
	t := m.t
	claims := m.claims()
	for i, a := range claims {
		for _, b := range claims[i+1:] {
			if a.who == b.who {
				continue
			}
			start := later(a.since, b.since)
			end := earlier(a.lastSent, b.lastSent)
			if start.Before(end) {
				t.Errorf("split brain: %s (leader since %s, still claimed at %s) and %s (leader since %s, still claimed at %s) overlap by %v",
					a.who, stamp(a.since), stamp(a.lastSent), b.who, stamp(b.since), stamp(b.lastSent), end.Sub(start))
			}
		}
	}
	for i, a := range claims {
		for _, b := range claims[i+1:] {
			if b.token < a.token || (a.who != b.who && b.token == a.token) {
				t.Errorf("fencing token did not grow: %s had %d from %s, then %s had %d from %s", a.who, a.token, stamp(a.since), b.who, b.token, stamp(b.since))
			}
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	lastToken := map[string]int64{}
	for _, o := range m.obs {
		if o.state.IsLeader && (o.state.ValidUntil == nil || !o.state.ValidUntil.After(o.sent)) {
			t.Errorf("%s claimed leadership past its validity: request sent %s, validUntil %v", o.who, stamp(o.sent), o.state.ValidUntil)
		}
		if prev, ok := lastToken[o.who]; ok && o.state.FencingToken < prev {
			t.Errorf("%s saw the fencing token go back from %d to %d", o.who, prev, o.state.FencingToken)
		}
		lastToken[o.who] = o.state.FencingToken
	}
	if len(m.obs) == 0 {
		t.Errorf("monitor observed nothing")
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
