//go:build integration

package e2e

import (
	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/invariant"
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
	state    api.Leader
}

// monitor asks every candidate for its state, all the time, and checks the
// safety invariants (package invariant) over the whole run when the test
// ends:
//   - never two candidates whose claims provably overlap: candidate A claimed
//     from its leaderSince until at least the moment its last "isLeader: true"
//     request was sent, and the same for B; if both intervals overlap, both
//     led at once. (Comparing snapshots instead would mistake poll skew on a
//     busy machine for split brain.)
//   - an answer "isLeader: true" always comes with a validUntil later than the
//     request: nothing is claimed after its expiry.
//   - fencing tokens only grow: across claims in order, and as seen by each
//     candidate process (a sidecar that has just started knows no token
//     until it has read the Lease: a restart of the same pod is a new
//     observer).
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
				m.record(observation{who: c.h.String(), sent: sent, received: time.Now(), state: s})
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

// check runs every answer of the whole run through the invariant checker
// shared with the benchmarks.
func (m *monitor) check() {
	m.mu.Lock()
	defer m.mu.Unlock()
	checker := invariant.New(true)
	for _, o := range m.obs {
		checker.Record(invariant.LeaderAnswer(o.who, o.sent, o.state))
	}
	report := checker.Check()
	for _, v := range report.Violations {
		m.t.Errorf("safety: %s", v)
	}
	if report.More > 0 {
		m.t.Errorf("safety: … and %d more violations", report.More)
	}
}

func stamp(t time.Time) string { return invariant.Stamp(t) }
