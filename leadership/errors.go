package leadership

import (
	"errors"
	"fmt"
	"time"
)

// AnyTerm, given as the token of a request that acts on a term (release,
// annotate, checkpoint), means whichever term this pod leads in.
const AnyTerm int64 = -1

// ErrNotLeader is returned by the requests that need this pod to lead
// (release, annotate) when it does not.
var ErrNotLeader = errors.New("this pod is not the leader")

// ErrOtherTerm is returned by a release of one term when this pod leads,
// but in another term than the one given: a request left over from an
// earlier term must not end the current one.
var ErrOtherTerm = errors.New("this pod leads in another term than the one given")

// ErrObserver is returned by election.Elector.Acquire on an observer (a
// pod that never campaigns).
var ErrObserver = errors.New("this pod is an observer (--candidate=false): it never takes the Lease")

// The reasons a fenced write to the Lease (an annotation: a partition's
// checkpoint) is refused; each also wraps ErrNotAnnotated.
var (
	// ErrNotAnnotated is wrapped by every refusal of an annotation:
	// nothing was written.
	ErrNotAnnotated = errors.New("lease not annotated")
	// ErrClaimExpired: this pod's claim on the term has run out (it could
	// not renew within the renew deadline, or it was paused).
	ErrClaimExpired = fmt.Errorf("%w: this pod's claim on the term has expired", ErrNotAnnotated)
	// ErrTermChanged: the Lease's current term is not the one asked for.
	ErrTermChanged = fmt.Errorf("%w: the lease's term is not the one given", ErrNotAnnotated)
	// ErrAnnotateConflict: the Lease kept changing under the write.
	ErrAnnotateConflict = fmt.Errorf("%w: the lease kept changing (conflicts)", ErrNotAnnotated)
)

// AcquireOptions say how hard a request to take the Lease tries.
type AcquireOptions struct {
	// Attempts is how many times the Lease is tried (at least one);
	// RetryDelay separates the attempts. An attempt on a Lease that another
	// holder renews fails at once, without a request: the watch-backed view
	// of the Lease is what client-go's own attempt would read.
	Attempts   int
	RetryDelay time.Duration
	// Wait, if above zero, replaces the attempts: campaign until this pod
	// leads or Wait has passed (a blocking campaign).
	Wait time.Duration
}
