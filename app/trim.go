package app

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/memtrim"
)

// trimAfterStartup drops the pages of the executable that the start
// touched (memtrim), once the start is over: by two lease durations the
// Lease's watch has synced, and a candidate has taken the Lease or seen who
// holds it (one that started after the holder's last renewal may take it
// over exactly one lease duration after its start: not then, so that the
// takeover does not share its moment with the trim). What runs after that
// comes back page by page; what ran only at the start (the init functions
// of every API group client-go registers, the first connection, the
// checks) stays out. It runs once.
func trimAfterStartup(ctx context.Context, after time.Duration) {
	logger := klog.FromContext(ctx)
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	res, err := memtrim.Trim()
	switch {
	case errors.Is(err, memtrim.ErrUnsupported):
		logger.V(2).Info("Not dropping the start's pages of the executable", "err", err)
	case err != nil:
		// Not an error of the sidecar's work: it only keeps more memory.
		logger.Info("Could not drop the start's pages of the executable; they stay resident", "err", err)
	default:
		logger.V(2).Info("Dropped the start's pages of the executable", "bytes", res.Bytes)
	}
}
