// Package leasetimings holds the rules of an election's three durations
// (lease duration, renew deadline, retry period), written once: the
// sidecar's flags (package options), election.Config.Validate and the
// benchmark apply them, and the Helm chart's guard is checked against them
// by test/packaging. It knows no elector: of client-go it uses only the
// jitter factor its renewal rule comes from.
package leasetimings

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// Timings are an election's three durations.
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

// ConfigTimingNames names the timings as election.Config's fields.
var ConfigTimingNames = TimingNames{LeaseDuration: "lease duration", RenewDeadline: "renew deadline", RetryPeriod: "retry period"}

// FlagTimingNames names the timings as the sidecar's (and the benchmark's)
// flags.
var FlagTimingNames = TimingNames{LeaseDuration: "--lease-duration", RenewDeadline: "--renew-deadline", RetryPeriod: "--retry-period"}

// Check returns one error per rule the timings break:
//   - each is positive;
//   - the lease duration is whole seconds: the Lease stores seconds;
//   - the lease duration is longer than the renew deadline: a leader stops
//     claiming leadership before anyone else may take the Lease;
//   - and longer by at least MinMargin: the largest of 1 s, 1% of the lease
//     duration and the retry period.
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
	} else if margin := MinMargin(t.LeaseDuration, t.RetryPeriod); t.LeaseDuration-t.RenewDeadline < margin {
		errs = append(errs, fmt.Errorf("%s (%v) must exceed %s (%v) by at least %v (the largest of 1s, 1%% of %s and %s): %w",
			names.LeaseDuration, t.LeaseDuration, names.RenewDeadline, t.RenewDeadline, margin, names.LeaseDuration, names.RetryPeriod, ErrShortMargin))
	}
	if minRenew := time.Duration(leaderelection.JitterFactor * float64(t.RetryPeriod)); t.RenewDeadline <= minRenew {
		errs = append(errs, fmt.Errorf("%s (%v) must be greater than %s × %v (%v)", names.RenewDeadline, t.RenewDeadline, names.RetryPeriod, leaderelection.JitterFactor, minRenew))
	}
	return errs
}

// ErrShortMargin is the error Check wraps when the lease duration exceeds
// the renew deadline by less than MinMargin. A caller that refuses a timing
// outside its own supported range may drop it, so that one mistake gives
// one error.
var ErrShortMargin = errors.New("the difference absorbs clock-rate drift and the time a leader's work takes to stop")

// MinMargin is the least difference between a lease duration and its renew
// deadline: the largest of 1 s, 1% of the lease duration and the retry
// period.
//
// A leader claims leadership until its last successful renewal's start plus
// the renew deadline, on its own monotonic clock; nobody else takes the
// Lease before it has seen that renewal unchanged for a lease duration, on
// its own clock, and it sees the renewal only after it was written. The
// difference is therefore all that separates the end of one claim from the
// start of the next, and it has to hold:
//
//   - clock-rate drift between the two nodes over a lease duration. NTP
//     slews a clock by at most 500 ppm, so two clocks part by at most 0.1%;
//     1% is ten times that, and the rate the token floors already assume
//     (docs/safety.md, "Clocks");
//
//   - the tail of a claim: work that was told "leader" just before the end
//     and has not stopped yet. The supervisor sends SIGKILL 100 ms
//     (killAhead) before the end, but the kill is sent late when the
//     container's CPU quota is spent (up to a CFS period, 100 ms, per
//     throttle) and a large process takes its time to exit; an app's
//     request in flight lands late. 1 s is ten times killAhead, and what the
//     shortest supported timings (2 s lease, 1 s renew deadline) leave.
//
//   - an app that polls. An app that reads isLeader every retry period
//     (rather than counting on validUntil or validForMs) learns that the
//     claim ended at most one retry period after its end; with a margin of
//     at least one retry period, that is no later than the earliest moment
//     another pod's term can start (plus its request's own latency). It
//     costs nothing at the shipped timings (15 s, 10 s, 2 s), and it keeps
//     the margin above the granularity at which candidates act.
//
// For the Lease alone, the retry period would not be needed: a candidate
// tries the Lease at most every retry period, so it takes an expired Lease
// up to one period after the expiry, never before. Watch latency only adds
// too: a candidate's lease duration counts from when it saw the renewal.
func MinMargin(leaseDuration, retryPeriod time.Duration) time.Duration {
	return max(time.Second, leaseDuration/100, retryPeriod)
}
