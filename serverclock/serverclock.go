// Package serverclock keeps a lower bound on the API server's wall clock,
// learned from the Date header of its answers. The election's fencing
// tokens are bounded by it (package election, newTermToken), so that a
// token stays above every token written on an earlier Lease of the same
// name. It wraps the transport of the clients that talk to the API server.
package serverclock

import (
	"math"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Epoch is the origin of the clock: Clock counts whole seconds since it.
// Package election's fencing tokens count from it too: a term that starts
// on a Lease object created t seconds after Epoch gets a token above t.
// 2026-01-01T00:00:00Z keeps tokens far below the int32 limit of
// spec.leaseTransitions until 2094.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Clock is a lower bound on the API server's wall clock, in whole
// seconds since Epoch: the Date header of the server's latest answer,
// plus the time elapsed since on this process's monotonic clock, less 1% for
// clock-rate drift. One is shared by every elector of a process
// (election.NewClientsets wraps its clients' transport with it). A lower
// bound is all the token rules of package election need: a token is never written above it, so never
// above the server's clock either. Only the Date counts: times stamped on
// objects can be old (creationTimestamp) or set by clients (managedFields).
type Clock struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	seconds int64
	at      time.Time
	known   bool
}

// DriftAllowance is the rate by which this process's clock may run faster
// than the API server's without the bound passing the server's clock.
const DriftAllowance = 0.01

// New returns a Clock that knows nothing yet; clk nil means the real
// clock.
func New(clk clock.PassiveClock) *Clock {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Clock{clock: clk}
}

// ObserveDate records the Date of an answer of the server. The latest answer
// replaces what was known, even if it says less: extrapolating an old one
// accumulates drift.
func (c *Clock) ObserveDate(date time.Time) {
	// A Date names a whole second (truncated): the server's clock was at
	// least that.
	seconds := int64(math.Floor(date.Sub(Epoch).Seconds()))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seconds, c.at, c.known = seconds, c.clock.Now(), true
}

// StaleAfter is the age of the last Date beyond which a Lease without
// history is not taken before the clock is read afresh: by then the drift
// allowance has taken more than half a second off the bound.
const StaleAfter = 50 * time.Second

// Stale reports whether the last Date is older than StaleAfter, or none is
// known.
func (c *Clock) Stale() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.known || c.clock.Since(c.at) > StaleAfter
}

// Bound returns the lower bound now, and whether anything is known.
func (c *Clock) Bound() (int64, bool) {
	if c == nil {
		return 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	elapsed := c.clock.Since(c.at).Seconds() * (1 - DriftAllowance)
	return c.seconds + int64(math.Floor(elapsed)), c.known
}

// WrapTransport records the Date header of every answer that passes
// through rt.
func (c *Clock) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return dateRecorder{next: rt, clock: c}
}

type dateRecorder struct {
	next  http.RoundTripper
	clock *Clock
}

func (d dateRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err == nil {
		if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			d.clock.ObserveDate(date)
		}
	}
	return resp, err
}
