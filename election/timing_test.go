package election

import "time"

// schedulingSlack is what the election tests allow, beyond the configured
// timings, for a loaded 2-core machine (CI's, and `make flake-hunt`'s,
// which runs a busy loop per core beside the test): a goroutine's timer
// or an HTTP answer waking late under the race detector, and the test's
// own 10 ms poll. A bound built with it stays well short of what the code
// would cost if it were wrong (docs/development.md, "Timing bounds in
// tests", lists them). Tests on the fake clock need none.
const schedulingSlack = 500 * time.Millisecond
