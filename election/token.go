package election

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/clock"
)

// tokenEpoch is the origin of the token clock: a term that starts on a Lease
// object created t seconds after it gets a fencing token above t (see
// newTermToken). 2026-01-01T00:00:00Z keeps tokens far below the int32
// limit of spec.leaseTransitions until 2094.
var tokenEpoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// errTokenExhausted is returned instead of starting a term whose token would
// not fit in spec.leaseTransitions (an int32): the API server would refuse
// the write, or the token would wrap and go back.
var errTokenExhausted = errors.New("the fencing token has reached the int32 limit of spec.leaseTransitions")

// errTokenAhead is returned instead of starting a term whose token would run
// ahead of the API server's clock (see newTermToken); it is a short wait,
// not a failure: the term starts as soon as the clock has caught up.
var errTokenAhead = errors.New("the next fencing token would run ahead of the API server's clock; waiting for it")

// ServerClock is a lower bound on the API server's wall clock, in whole
// seconds since tokenEpoch: the latest time the server has stated (the Date
// header of its answers, and the times it stamps on Lease objects), plus the
// time elapsed since on this process's monotonic clock. One is shared by
// every elector of a process (NewClientsets records the Date of every
// answer into it). A lower bound is all the token rules need: a token is
// never written above it, so never above the server's clock either.
type ServerClock struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	seconds int64
	at      time.Time
	known   bool
}

// NewServerClock returns a ServerClock that knows nothing yet; clk nil means
// the real clock.
func NewServerClock(clk clock.PassiveClock) *ServerClock {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &ServerClock{clock: clk}
}

// observe records that the server's clock was at least stamp.
func (c *ServerClock) observe(stamp time.Time) {
	if stamp.IsZero() {
		return
	}
	// Stamps are truncated to the second: the server's clock was at least
	// the whole second they name.
	seconds := int64(math.Floor(stamp.Sub(tokenEpoch).Seconds()))
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	if !c.known || seconds > c.boundLocked(now) {
		c.seconds, c.at, c.known = seconds, now, true
	}
}

// bound returns the lower bound now, and whether anything is known.
func (c *ServerClock) bound() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.boundLocked(c.clock.Now()), c.known
}

func (c *ServerClock) boundLocked(now time.Time) int64 {
	return c.seconds + int64(now.Sub(c.at)/time.Second)
}

// WrapTransport records the Date header of every answer that passes
// through rt.
func (c *ServerClock) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return dateRecorder{next: rt, clock: c}
}

type dateRecorder struct {
	next  http.RoundTripper
	clock *ServerClock
}

func (d dateRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(req)
	if err == nil {
		if date, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			d.clock.observe(date)
		}
	}
	return resp, err
}

// observeObject records what the Lease object's metadata says of the API
// server's clock and of the object's identity. Only times the API server
// stamped count: holders' renewTimes come from their own clocks.
func (t *tracker) observeObject(lease *coordinationv1.Lease) {
	t.server.observe(lease.CreationTimestamp.Time)
	for _, f := range lease.ManagedFields {
		if f.Time != nil {
			t.server.observe(f.Time.Time)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created = lease.CreationTimestamp.Time
}

// newTermToken returns the fencing token of a new term this process is
// about to write, given the token client-go proposes (the Lease's token plus
// one). The token is the largest of:
//   - what client-go proposes;
//   - one more than any token this process has seen or written, which keeps
//     it growing across a deletion, replacement or restore of the Lease
//     while this process runs;
//   - one more than the seconds from tokenEpoch to the creation of the Lease
//     object, which keeps it growing across a re-creation while no sidecar
//     runs: every token ever written on an earlier object of that name was
//     at most the server's clock (in seconds since tokenEpoch) when it was
//     written (the rule below), and that object was deleted before this one
//     was created;
//   - for a Lease without a holder's history (replaced as `spec: {}` by
//     kubectl replace or helm upgrade --force, which keep the object but
//     reset its token), one more than the server's clock when this process
//     first saw it so: the server answered with that record after every
//     earlier token was written, and its clock was past each of them.
//
// The rule that makes the last point hold: a token is never written above
// the API server's clock as this process knows it (serverClock). A group
// that starts more terms than one a second, over the life of its Lease
// object, waits here for the clock to catch up (errTokenAhead), one second
// at most per term. Without any server time known (a fake clientset), the
// rule is not applied.
func (t *tracker) newTermToken(proposed int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	token := max(proposed, t.highest+1)
	if !t.created.IsZero() {
		token = max(token, int64(t.created.Sub(tokenEpoch)/time.Second)+1)
	}
	if t.observed.historyless() {
		token = max(token, t.historylessFloor+1)
	}
	if token > math.MaxInt32 {
		return 0, fmt.Errorf("%w: the next term would need token %d; delete the Lease to start over (a new Lease object starts above the seconds since %s, and the tokens published by the old one cannot be exceeded: see docs/safety.md)", errTokenExhausted, token, tokenEpoch.Format(time.DateOnly))
	}
	if bound, known := t.server.bound(); known && token > bound {
		return 0, fmt.Errorf("%w: token %d, server clock %d", errTokenAhead, token, bound)
	}
	return token, nil
}

// currentOwnTerm returns the token of this process's own term if the Lease,
// as last observed, still shows it: a write for this identity then
// continues that term rather than starting a new one.
func (t *tracker) currentOwnTerm() (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := t.hasOwnTerm && t.observed.holder == t.identity && t.observed.transitions == t.ownToken
	return t.ownToken, ok
}
