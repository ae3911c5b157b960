package app

import (
	"slices"
	"testing"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

// TestElectorReasonsAreTheAPIs: the reasons the elector records are the
// vocabulary api publishes to apps (and which api's own test checks against
// the docs and the dashboard), word for word and in order.
func TestElectorReasonsAreTheAPIs(t *testing.T) {
	var got []string
	for _, r := range leadership.Reasons {
		got = append(got, string(r))
	}
	if want := api.ChangeReasons(); !slices.Equal(got, want) {
		t.Errorf("leadership.Reasons = %v, want api.ChangeReasons() = %v", got, want)
	}
}
