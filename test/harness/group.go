package harness

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Member is what a Group holds: a *Candidate, or a caller's own type that
// wraps one (e2e binds each candidate to its test, the benchmark to its
// service account).
type Member interface {
	comparable
	// Process is the candidate process the member runs.
	Process() *Candidate
}

// Process is c itself, so that a *Candidate is a Member.
func (c *Candidate) Process() *Candidate { return c }

// How often the waits ask each member's GET /leader.
const (
	leaderPoll = 10 * time.Millisecond
	followPoll = 20 * time.Millisecond
)

// askAtOnce is how many members a wait asks at the same time. Asked one
// after another, a round of 200 candidates lasts 200 answers on a loaded
// machine, and a timeout can end the wait on a round whose first answers
// predate the handover: the 200-candidate benchmark of 3acc34d failed
// twice, on client-go's group, naming only members asked early in the
// round as not following.
const askAtOnce = 16

// ask calls f for every member, askAtOnce at a time, and returns the
// members it held true for, in the order of ms.
func ask[M Member](ctx context.Context, ms []M, f func(context.Context, M) bool) []M {
	hit := make([]bool, len(ms))
	var g errgroup.Group
	g.SetLimit(askAtOnce)
	for i, m := range ms {
		g.Go(func() error {
			hit[i] = f(ctx, m)
			return nil
		})
	}
	_ = g.Wait()
	var out []M
	for i, m := range ms {
		if hit[i] {
			out = append(out, m)
		}
	}
	return out
}

// Group is candidates racing for one Lease. The zero value is an empty
// group; it is safe for concurrent use (a monitor may read the members
// while a test adds one).
type Group[M Member] struct {
	mu      sync.Mutex
	members []M
}

// Add puts m in the group.
func (g *Group[M]) Add(m M) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.members = append(g.members, m)
}

// Members are every member added, running or not, in the order added.
func (g *Group[M]) Members() []M {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.members)
}

// Live are the members whose process is still running.
func (g *Group[M]) Live() []M {
	var live []M
	for _, m := range g.Members() {
		if m.Process().Running() {
			live = append(live, m)
		}
	}
	return live
}

// KillAll kills every member still running (SIGKILL) and waits for them.
func (g *Group[M]) KillAll() {
	for _, m := range g.Live() {
		m.Process().Kill()
	}
}

// WaitLeader waits until exactly one running member, other than those in
// exclude, answers GET /leader with isLeader, and returns it. A member that
// does not answer is not counted: a stopped or exiting one cannot, and its
// term is the monitor's to judge.
func (g *Group[M]) WaitLeader(ctx context.Context, timeout time.Duration, exclude ...M) (M, error) {
	// leaders is the last round's that was not cut short by the timeout.
	var leaders []M
	err := wait.PollUntilContextTimeout(ctx, leaderPoll, timeout, true, func(ctx context.Context) (bool, error) {
		round := ask(ctx, g.Live(), func(ctx context.Context, m M) bool {
			if slices.Contains(exclude, m) {
				return false
			}
			s, err := m.Process().API().Leader(ctx)
			return err == nil && s.IsLeader
		})
		if ctx.Err() == nil || len(round) == 1 {
			leaders = round
		}
		return len(round) == 1, nil
	})
	if err != nil {
		var none M
		return none, fmt.Errorf("no single leader within %v (last seen leading: %s): %w", timeout, names(leaders), err)
	}
	return leaders[0], nil
}

// WaitFollowing waits until every running member other than leader answers
// GET /leader naming leader as the holder, and not leading itself: the
// group has settled on leader.
func (g *Group[M]) WaitFollowing(ctx context.Context, timeout time.Duration, leader M) error {
	// lagging is the last round's that was not cut short by the timeout.
	var lagging []M
	err := wait.PollUntilContextTimeout(ctx, followPoll, timeout, true, func(ctx context.Context) (bool, error) {
		round := ask(ctx, g.Live(), func(ctx context.Context, m M) bool {
			return m != leader && !m.Process().follows(ctx, leader.Process().Name())
		})
		if ctx.Err() == nil || len(round) == 0 {
			lagging = round
		}
		return len(round) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("not following %s within %v: %s: %w", leader.Process().Name(), timeout, names(lagging), err)
	}
	return nil
}

// WaitFollowing waits until c answers GET /leader naming leader as the
// holder, and not leading itself. On a timeout the error says what c last
// answered.
func (c *Candidate) WaitFollowing(ctx context.Context, timeout time.Duration, leader string) error {
	err := wait.PollUntilContextTimeout(ctx, followPoll, timeout, true, func(ctx context.Context) (bool, error) {
		return c.follows(ctx, leader), nil
	})
	if err != nil {
		s, serr := c.API().Leader(ctx)
		return fmt.Errorf("%s does not follow %s within %v: %+v (%v): %w", c.name, leader, timeout, s, serr, err)
	}
	return nil
}

// follows tells whether c answers that leader holds the Lease.
func (c *Candidate) follows(ctx context.Context, leader string) bool {
	s, err := c.API().Leader(ctx)
	return err == nil && s.Holder == leader && !s.IsLeader
}

func names[M Member](ms []M) string {
	if len(ms) == 0 {
		return "none"
	}
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Process().Name()
	}
	return fmt.Sprint(out)
}
