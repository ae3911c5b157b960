package leasetimings

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
		{name: "renew just above retry × 1.2", lease: 3 * s, renew: 1201 * time.Millisecond, retry: s},
		// The margin between lease and renew deadline: at least 1 s, at
		// least 1% of the lease duration, and at least the retry period.
		{name: "margin of exactly a second", lease: 4 * s, renew: 3 * s, retry: s},
		{name: "margin just under a second", lease: 2 * s, renew: 1001 * time.Millisecond, retry: 100 * time.Millisecond, want: []string{"lease-x (2s) must exceed renew-x (1.001s) by at least 1s"}},
		{name: "the review's 15s/14.99s", lease: 15 * s, renew: 14990 * time.Millisecond, retry: 100 * time.Millisecond, want: []string{"lease-x (15s) must exceed renew-x (14.99s) by at least 1s"}},
		{name: "margin of exactly 1% of a long lease", lease: 200 * s, renew: 198 * s, retry: 2 * s},
		{name: "margin under 1% of a long lease", lease: 200 * s, renew: 198100 * time.Millisecond, retry: 2 * s, want: []string{"lease-x (3m20s) must exceed renew-x (3m18.1s) by at least 2s"}},
		{name: "longest lease, an hour's margin", lease: 24 * time.Hour, renew: 23 * time.Hour, retry: time.Hour},
		{name: "longest lease, margin under 1%", lease: 24 * time.Hour, renew: 23*time.Hour + 46*time.Minute, retry: time.Hour, want: []string{"by at least 1h0m0s"}},
		{name: "longest lease, 1% margin with a short retry", lease: 24 * time.Hour, renew: 85536 * s, retry: time.Minute},
		{name: "longest lease, margin under 1% with a short retry", lease: 24 * time.Hour, renew: 85537 * s, retry: time.Minute, want: []string{"by at least 14m24s"}},
		{name: "margin of exactly the retry period", lease: 15 * s, renew: 12 * s, retry: 3 * s},
		{name: "margin under the retry period", lease: 15 * s, renew: 12 * s, retry: 3001 * time.Millisecond, want: []string{"lease-x (15s) must exceed renew-x (12s) by at least 3.001s (the largest of 1s, 1% of lease-x and retry-x)"}},
		{name: "renew at retry × 1.2", lease: 30 * s, renew: 12 * s, retry: 10 * s, want: []string{"renew-x (12s) must be greater than retry-x × 1.2 (12s)"}},
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
