package app

// sidecarGCPercent is the garbage collector's target for the sidecar: the
// heap may grow by half its live size before a collection, not by all of
// it (Go's default, GOGC=100). The live heap is a few MiB and steady (the
// API types' scheme, one Lease, the metrics), so the heap's peak, which the
// container's working set counts, shrinks, for a few more collections of a
// small heap: see docs/performance.md for the figures.
const sidecarGCPercent = 50

// SetGCPercent sets sidecarGCPercent unless GOGC is set: the user's
// setting wins (the runtime has read it already).
func SetGCPercent(lookupEnv func(string) (string, bool), set func(int) int) {
	if _, ok := lookupEnv("GOGC"); ok {
		return
	}
	set(sidecarGCPercent)
}
