package election

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leasecache"
)

// LeaseFeed delivers the versions of an elector's Lease from a watch that
// is not the elector's own: one watch over a group's Leases (package
// partition), so that N Leases cost one watch and no reads.
type LeaseFeed interface {
	// Feed registers an elector's Lease and where to deliver it. New calls
	// it, before the feed's watch starts.
	Feed(namespace, name string, sink LeaseSink) error
}

// LeaseSink takes what a LeaseFeed's watch delivers about one Lease.
type LeaseSink interface {
	// Observe takes a version of the Lease.
	Observe(lease *coordinationv1.Lease)
	// ObserveDeleted takes the Lease's deletion.
	ObserveDeleted()
	// Synced says that the watch has delivered the Lease's state (a Lease
	// it has not delivered does not exist).
	Synced()
}

// The elector's cache is the sink of its feed.
var _ LeaseSink = (*leasecache.Cache)(nil)

// Observer follows a Lease that no elector of this process runs (another
// pod's membership Lease), with the same time-bounded view of its holder as
// an elector has of its own Lease: the holder counts until it has not
// renewed for its lease duration, as this pod observed it.
type Observer struct {
	t *tracker
}

// NewObserver returns an Observer of the Lease namespace/name. onChange, if
// set, is called (it must not block) when the holder changes or expires.
func NewObserver(clk clock.WithDelayedExecution, namespace, name string, onChange func()) *Observer {
	// Any positive renew deadline: an observer never claims the Lease.
	t := newTracker(clk, namespace, name, "", time.Second, 2*time.Second)
	t.onChange = onChange
	return &Observer{t: t}
}

// Observe takes a version of the Lease.
func (o *Observer) Observe(lease *coordinationv1.Lease) {
	o.t.observeRead(recordOf(resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)))
}

// Snapshot returns the Lease's state as observed.
func (o *Observer) Snapshot() leadership.State { return o.t.Snapshot() }

// Stop releases the timer that publishes the holder's expiry.
func (o *Observer) Stop() { o.t.stop() }
