package election

import (
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// Timings are an election's three durations. Their rules are written here
// once and applied by every entry point: the sidecar's flags (package
// options), Config.Validate, the benchmark; the Helm chart's guard is
// checked against the sidecar's verdict by test/packaging.
type Timings struct {
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
}

// TimingNames is how an error names each timing: flags, fields or chart
// values, so that the message speaks the caller's language.
type TimingNames struct {
	LeaseDuration, RenewDeadline, RetryPeriod string
}

// ConfigTimingNames names the timings as Config's fields.
var ConfigTimingNames = TimingNames{LeaseDuration: "lease duration", RenewDeadline: "renew deadline", RetryPeriod: "retry period"}

// FlagTimingNames names the timings as the sidecar's (and the benchmark's)
// flags.
var FlagTimingNames = TimingNames{LeaseDuration: "--lease-duration", RenewDeadline: "--renew-deadline", RetryPeriod: "--retry-period"}

// Check returns one error per rule the timings break:
//   - each is positive;
//   - the lease duration is whole seconds: the Lease stores seconds;
//   - the lease duration is longer than the renew deadline: a leader stops
//     claiming leadership before anyone else may take the Lease;
//   - the renew deadline is longer than the retry period × client-go's
//     jitter factor (1.2), client-go's own rule: a leader gets at least one
//     renewal attempt per deadline.
//
// The ordering rules are checked only when every timing is positive, so
// that one mistake gives one error.
func (t Timings) Check(names TimingNames) []error {
	var errs []error
	positive := true
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{names.LeaseDuration, t.LeaseDuration}, {names.RenewDeadline, t.RenewDeadline}, {names.RetryPeriod, t.RetryPeriod}} {
		if d.value <= 0 {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", d.name, d.value))
			positive = false
		}
	}
	if t.LeaseDuration > 0 && t.LeaseDuration%time.Second != 0 {
		errs = append(errs, fmt.Errorf("%s %v is not a whole number of seconds (the Lease stores seconds)", names.LeaseDuration, t.LeaseDuration))
	}
	if !positive {
		return errs
	}
	if t.LeaseDuration <= t.RenewDeadline {
		errs = append(errs, fmt.Errorf("%s (%v) must be greater than %s (%v)", names.LeaseDuration, t.LeaseDuration, names.RenewDeadline, t.RenewDeadline))
	}
	if minRenew := time.Duration(leaderelection.JitterFactor * float64(t.RetryPeriod)); t.RenewDeadline <= minRenew {
		errs = append(errs, fmt.Errorf("%s (%v) must be greater than %s × %v (%v)", names.RenewDeadline, t.RenewDeadline, names.RetryPeriod, leaderelection.JitterFactor, minRenew))
	}
	return errs
}
