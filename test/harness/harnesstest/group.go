package harnesstest

import (
	"context"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/test/harness"
)

// Group is a harness.Group bound to a test: its waits fail the test
// instead of returning an error. Set T; the rest of the zero value is an
// empty group.
type Group[M harness.Member] struct {
	harness.Group[M]
	T testing.TB
}

// WaitLeader is harness.Group.WaitLeader; it fails the test if no single
// leader shows within timeout.
func (g *Group[M]) WaitLeader(timeout time.Duration, exclude ...M) M {
	g.T.Helper()
	leader, err := g.Group.WaitLeader(context.Background(), timeout, exclude...)
	if err != nil {
		g.T.Fatal(err)
	}
	return leader
}

// followTimeout bounds how long a follower may take to name a new holder:
// it learns of it by a watch event, or at worst by its next retry.
const followTimeout = 5 * time.Second

// WaitFollowing waits until c names leader as the holder and does not lead
// itself; it fails the test after 5 s.
func WaitFollowing[M harness.Member](t testing.TB, c, leader M) {
	t.Helper()
	if err := c.Process().WaitFollowing(context.Background(), followTimeout, leader.Process().Name()); err != nil {
		t.Fatal(err)
	}
}
