package partition

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/leader-elector/leader-elector/ownership"
)

// Snapshot returns the current state.
func (m *Member) Snapshot() ownership.State {
	s, _ := m.Watch()
	return s
}

// Watch returns the current state and a channel closed at its next change.
func (m *Member) Watch() (ownership.State, <-chan struct{}) {
	// The view is taken under m.mu, as reconcile takes its own: taken
	// before the lock, a view older than one a reconcile has published
	// meanwhile would be published after it, and the state would go back
	// (measured at 1,024 partitions: a partition logged as owned, no longer
	// owned and owned again within 10 ms, each a new revision for every
	// long-poll).
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.assess()
	m.publishLocked(v)
	return m.stateLocked(v), m.changed
}

func (m *Member) stateLocked(v view) ownership.State {
	lo, hi := FairShare(v.effective, len(v.sharing))
	s := ownership.State{
		Namespace:           m.cfg.Namespace,
		Name:                m.cfg.Name,
		Identity:            m.cfg.Identity,
		Partitions:          len(m.partitions),
		LeaseDuration:       m.cfg.LeaseDuration,
		EffectivePartitions: v.effective,
		Members:             len(v.members),
		Member:              v.member,
		FairShareMin:        lo,
		FairShareMax:        hi,
		Revision:            m.revision,
		Degraded:            v.degraded != "",
		DegradedReason:      v.degraded,
	}
	for _, i := range v.mine {
		st := v.states[i]
		o := ownership.Owned{Partition: i, FencingToken: st.FencingToken, Since: st.LeaderSince, ValidUntil: st.ValidUntil, RenewTime: st.RenewTime, Deadline: st.Deadline, Checkpoint: m.checkpoint(i)}
		if m.draining[i] {
			o.Draining, o.DrainDeadline = true, m.drainDeadline
		}
		s.Owned = append(s.Owned, o)
	}
	return s
}

// publishLocked bumps the revision and wakes watchers when the members or
// the owned partitions changed, and keeps the measures of rebalancing.
func (m *Member) publishLocked(v view) {
	now := m.clock.Now()
	if strings.Join(v.members, "\n") != strings.Join(m.members, "\n") || v.effective != m.effective || strings.Join(v.sharing, "\n") != strings.Join(m.sharing, "\n") {
		// A change of the effective N, or of the healthy members among
		// whom the partitions are shared, moves partitions as a change of
		// members does.
		m.effective = v.effective
		m.members = v.members
		m.sharing = v.sharing
		m.membersChanged = now
		m.settled = false
	}
	if !m.settled && Fair(v.effective, v.sharing, v.owners[:v.effective]) {
		m.settled = true
		m.metrics.assignment.Observe(now.Sub(m.membersChanged).Seconds())
	}
	key := publishedKey(v) + fmt.Sprintf("|draining %v until %d", slices.Sorted(maps.Keys(m.draining)), m.drainDeadline.UnixNano())
	if key == m.published {
		return
	}
	m.logChanges(v)
	m.published = key
	m.revision++
	close(m.changed)
	m.changed = make(chan struct{})
}

// logChanges logs the partitions this pod gained and lost.
func (m *Member) logChanges(v view) {
	logger := m.logger
	now := map[int]int64{}
	for _, i := range v.mine {
		now[i] = v.states[i].FencingToken
		if token, had := m.owned[i]; !had || token != now[i] {
			logger.Info("Owns partition", "partition", i, "fencingToken", now[i], "owned", len(v.mine), "members", len(v.members))
		}
	}
	for i, token := range m.owned {
		if _, still := now[i]; !still {
			logger.Info("No longer owns partition", "partition", i, "fencingToken", token, "owned", len(v.mine), "members", len(v.members))
		}
	}
	m.owned = now
}

func publishedKey(v view) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%t|%d|%s|%s|%s|", v.member, v.effective, strings.Join(v.members, ","), strings.Join(v.sharing, ","), v.degraded)
	for _, i := range v.mine {
		fmt.Fprintf(&b, "%d:%d:%d,", i, v.states[i].FencingToken, v.states[i].LeaderSince.UnixNano())
	}
	return b.String()
}
