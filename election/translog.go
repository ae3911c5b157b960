package election

import (
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/leadership"
)

// transitionLog writes an elector's log lines about its leadership: each
// change at the default verbosity with its reason and fencing token, and the
// other holders it observes at -v=2.
//
// It has no goroutine of its own: the tracker wakes it at every change of
// the state, and a short-lived goroutine writes what changed. A goroutine
// that waited for changes would cost a stack per elector while idle, and
// partition mode runs an elector per partition (1 024 at most). The lines
// are not written under the tracker's lock, which readers of the state take:
// a blocked stderr must not stall them.
type transitionLog struct {
	tracker *tracker
	// pending is set while a write is started and has not yet begun.
	pending atomic.Bool

	// mu orders the writes: a change is taken and written under it, so two
	// writers cannot interleave their lines out of order.
	mu sync.Mutex
	// logger is nil outside of Run: nothing is written then.
	logger *klog.Logger
	prev   leadership.State
}

// wake starts a write of the changes unless one is already about to begin.
// It runs under the tracker's lock and must not block.
func (l *transitionLog) wake() {
	if l.pending.CompareAndSwap(false, true) {
		go l.write()
	}
}

// start makes the log write with logger from now on; holders observed
// before are not logged.
func (l *transitionLog) start(logger klog.Logger) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.logger = &logger
	l.prev = l.tracker.Snapshot()
}

// stop writes the changes not yet written (the one that ended the run
// among them) and then nothing more.
func (l *transitionLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writeLocked()
	l.logger = nil
}

func (l *transitionLog) write() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.writeLocked()
}

func (l *transitionLog) writeLocked() {
	// A change from here on starts another write, which waits for this
	// one: none is missed.
	l.pending.Store(false)
	if l.logger == nil {
		return
	}
	logger := *l.logger
	for _, c := range l.tracker.takeChanges() {
		logChange(logger, c)
	}
	cur := l.tracker.Snapshot()
	if !cur.IsLeader && (cur.Holder != l.prev.Holder || cur.FencingToken != l.prev.FencingToken) {
		logger.V(2).Info("Observed new holder", "holder", cur.Holder, "fencingToken", cur.FencingToken)
	}
	l.prev = cur
}

// logChange writes the line of one leadership change.
func logChange(logger klog.Logger, c leadership.Change) {
	if c.Leader {
		logger.Info("Became leader", "reason", c.Reason, "fencingToken", c.FencingToken)
		return
	}
	logger.Info("Stopped leading", "reason", c.Reason, "fencingToken", c.FencingToken)
}
