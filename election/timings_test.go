package election

import (
	"strings"
	"testing"
	"time"
)

// TestTimingsCheck: every rule, at and around its edge, and one error per
// broken rule.
func TestTimingsCheck(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name                string
		lease, renew, retry time.Duration
		want                []string // substrings, one per expected error
	}{
		{name: "defaults", lease: 15 * s, renew: 10 * s, retry: 2 * s},
		{name: "short", lease: 2 * s, renew: 1 * s, retry: 100 * time.Millisecond},
		{name: "renew just above retry × 1.2", lease: 2 * s, renew: 1201 * time.Millisecond, retry: s},
		{name: "renew at retry × 1.2", lease: 15 * s, renew: 12 * s, retry: 10 * s, want: []string{"renew-x (12s) must be greater than retry-x × 1.2 (12s)"}},
		{name: "lease at renew", lease: 10 * s, renew: 10 * s, retry: 2 * s, want: []string{"lease-x (10s) must be greater than renew-x (10s)"}},
		{name: "lease below renew", lease: 5 * s, renew: 10 * s, retry: 2 * s, want: []string{"must be greater than renew-x"}},
		{name: "fractional lease", lease: 15500 * time.Millisecond, renew: 10 * s, retry: 2 * s, want: []string{"lease-x 15.5s is not a whole number of seconds"}},
		{name: "zero and negative", lease: 0, renew: -s, retry: 0, want: []string{"lease-x must be positive", "renew-x must be positive", "retry-x must be positive"}},
		{name: "not positive skips the order", lease: 15 * s, renew: 0, retry: 2 * s, want: []string{"renew-x must be positive"}},
		{name: "two rules broken", lease: 2 * s, renew: 2 * s, retry: 2 * s, want: []string{"lease-x (2s) must be greater", "renew-x (2s) must be greater"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := Timings{LeaseDuration: tc.lease, RenewDeadline: tc.renew, RetryPeriod: tc.retry}.Check(TimingNames{"lease-x", "renew-x", "retry-x"})
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors %v, want %d", len(errs), errs, len(tc.want))
			}
			for i, want := range tc.want {
				if !strings.Contains(errs[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, errs[i], want)
				}
			}
		})
	}
}
