package election

import (
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// Guarantees are the bounds that follow from the election's timings.
type Guarantees struct {
	// CrashTakeover bounds the time from a leader's crash to a new leader:
	// the Lease must go unrenewed for a lease duration, and a candidate
	// that missed the watch event tries again within a jittered retry
	// period (up to 1+JitterFactor retry periods).
	CrashTakeover time.Duration
	// ClockDriftMargin is the fraction by which a leader's clock may run
	// slow relative to the candidates' before it could still claim
	// leadership after another pod may take over: (lease duration − renew
	// deadline) / lease duration.
	ClockDriftMargin float64
	// APIOutageSurvived is the API server outage the leader keeps leading
	// through in the worst case (it starts just before a renewal): renew
	// deadline − retry period. An outage that starts just after a renewal
	// is survived for up to the renew deadline.
	APIOutageSurvived time.Duration
}

// Guarantees computes the bounds of the configured timings.
func (c Config) Guarantees() Guarantees {
	return Guarantees{
		CrashTakeover:     c.LeaseDuration + time.Duration((1+leaderelection.JitterFactor)*float64(c.RetryPeriod)),
		ClockDriftMargin:  float64(c.LeaseDuration-c.RenewDeadline) / float64(c.LeaseDuration),
		APIOutageSurvived: c.RenewDeadline - c.RetryPeriod,
	}
}
