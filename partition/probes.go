package partition

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// settleBound is how long after a change of members the group may take to
// reach a full and fair assignment: a dead member's partitions expire after
// the lease duration, and the survivors take them within a few retry
// periods.
func (m *Member) settleBound() time.Duration {
	return m.cfg.LeaseDuration + 4*m.cfg.RetryPeriod
}

// Ready is the readiness of a pod in partition mode: it is a live member and
// owns at least its fair share ⌊N/M⌋ of the effective N, or the members changed less than
// lease duration + 4 retry periods ago (the group is still settling).
func (m *Member) Ready() error {
	s := m.Snapshot()
	if !s.Member {
		return errors.New("not a member of the partition group yet (no membership Lease)")
	}
	// Partitions beyond the effective N are on their way out and do not
	// count towards the share.
	owned := 0
	for _, o := range s.Owned {
		if o.Partition < s.EffectivePartitions {
			owned++
		}
	}
	if owned >= s.FairShareMin {
		return nil
	}
	m.mu.Lock()
	since := m.clock.Since(m.membersChanged)
	m.mu.Unlock()
	if since < m.settleBound() {
		return nil
	}
	return fmt.Errorf("owns %d partitions, below its fair share of %d (members: %d, effective partitions: %d of its %d)", owned, s.FairShareMin, s.Members, s.EffectivePartitions, s.Partitions)
}

// Candidate fails until the membership elector runs and has reached the API
// server (--readiness=candidate).
func (m *Member) Candidate() error { return m.membership.Candidate() }

// Healthy fails when any of this pod's electors is wedged.
func (m *Member) Healthy() error {
	if err := m.membership.Healthy(); err != nil {
		return err
	}
	for i, e := range m.partitions {
		if err := e.Healthy(); err != nil {
			return fmt.Errorf("partition %d: %w", i, err)
		}
	}
	return nil
}

// Release hands partition i back: this pod stops claiming it, clears its
// Lease and stays away from it for one lease duration, so a member below its
// fair share takes it (if none is, it stays free for that time). A draining
// partition is handed over as the rebalance wanted: without the sit-out
// (the gate keeps this pod off it).
func (m *Member) Release(ctx context.Context, i int) (ownership.State, error) {
	return m.ReleaseTerm(ctx, i, leadership.AnyTerm)
}

// ReleaseTerm is Release of partition i's term token only (the fencing
// token the app was given for it; leadership.AnyTerm: whichever this pod
// owns it in). A release left over from an earlier term is refused with
// an error wrapping leadership.ErrOtherTerm, and the current term goes on.
// The term is checked here, before the draining bookkeeping, and again by
// the elector together with giving up the claim (election.ReleaseTerm),
// which is what makes it safe: a term that began between the two checks
// is not released, though its drain may then be started over.
func (m *Member) ReleaseTerm(ctx context.Context, i int, token int64) (ownership.State, error) {
	if i < 0 || i >= len(m.partitions) {
		return m.Snapshot(), fmt.Errorf("%w: %d (the group has partitions 0..%d)", ownership.ErrOutOfRange, i, len(m.partitions)-1)
	}
	s := m.partitions[i].Snapshot()
	if !s.IsLeader {
		return m.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
	}
	if token != leadership.AnyTerm && token != s.FencingToken {
		return m.Snapshot(), fmt.Errorf("partition %d: %w (current %d, given %d)", i, leadership.ErrOtherTerm, s.FencingToken, token)
	}
	release := func(ctx context.Context) (leadership.State, error) { return m.partitions[i].ReleaseTerm(ctx, token) }
	m.mu.Lock()
	v := m.assess() // under m.mu, as reconcile's view
	if m.draining[i] {
		m.logger.Info("The app released a draining partition; handing it over", "partition", i)
		delete(m.draining, i)
		if i < v.effective {
			// Beyond the effective N no one takes it: the next
			// handover does not wait for that.
			m.handover, m.handoverSince = i, m.clock.Now()
		}
		m.releasing++
		m.acknowledged[i] = true
		m.metrics.rebalances.Inc()
		release = func(ctx context.Context) (leadership.State, error) {
			defer func() {
				m.mu.Lock()
				m.releasing--
				delete(m.acknowledged, i)
				m.mu.Unlock()
			}()
			return m.partitions[i].ReleaseTermFor(ctx, 0, token)
		}
	}
	m.mu.Unlock()
	if _, err := release(ctx); err != nil {
		switch {
		case errors.Is(err, leadership.ErrNotLeader):
			err = fmt.Errorf("%w: %d", ownership.ErrNotOwned, i)
		case errors.Is(err, leadership.ErrOtherTerm):
			err = fmt.Errorf("partition %d: %w", i, err)
		}
		return m.Snapshot(), err
	}
	m.poke()
	return m.Snapshot(), nil
}
