package app

import (
	"context"
	"testing"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leadership"
)

// TestElectorEndsTermsForTheRouter: the router ends a term whose routing
// was taken away under its token through its Leadership's ReleaseTerm, if
// it has one (routing.termEnder); startRouting gives it the elector, which
// must keep that method, or a leader refused by the admission policies
// stays leader with no route.
func TestElectorEndsTermsForTheRouter(t *testing.T) {
	var l any = (*election.Elector)(nil)
	if _, ok := l.(interface {
		ReleaseTerm(ctx context.Context, token int64) (leadership.State, error)
	}); !ok {
		t.Error("*election.Elector has no ReleaseTerm(ctx, token) (leadership.State, error): the router cannot end a term whose routing was taken away")
	}
}
