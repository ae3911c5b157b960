package election

import (
	"errors"
	"testing"

	"github.com/leader-elector/leader-elector/leadership"
)

// TestElectorReleaseTerm: a release naming an earlier term is refused with
// ErrOtherTerm and the current term goes on (still leading, the Lease
// untouched); one naming the current term releases it.
func TestElectorReleaseTerm(t *testing.T) {
	t.Parallel()
	ctx, client, e := newFastElector(t)
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	holder, token := leaseHolder(t, client)

	s, err := e.ReleaseTerm(ctx, int64(token)-1)
	if !errors.Is(err, leadership.ErrOtherTerm) {
		t.Fatalf("ReleaseTerm(%d) with the term %d current: %v, want leadership.ErrOtherTerm", token-1, token, err)
	}
	if !s.IsLeader || s.FencingToken != int64(token) || e.SittingOut() {
		t.Errorf("after a stale release: %+v (sitting out: %v), want still leading in term %d", s, e.SittingOut(), token)
	}
	if h, tr := leaseHolder(t, client); h != holder || tr != token {
		t.Errorf("the Lease after a stale release: %q %d, want %q %d", h, tr, holder, token)
	}

	s, err = e.ReleaseTerm(ctx, int64(token))
	if err != nil || s.IsLeader {
		t.Fatalf("ReleaseTerm of the current term: %v, leading %v", err, s.IsLeader)
	}
	if h, _ := leaseHolder(t, client); h != "" {
		t.Errorf("the Lease after the release names %q", h)
	}
	if _, err := e.ReleaseTerm(ctx, int64(token)); !errors.Is(err, leadership.ErrNotLeader) {
		t.Errorf("ReleaseTerm when not leading: %v, want leadership.ErrNotLeader", err)
	}
}
