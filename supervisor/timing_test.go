package supervisor

import "time"

// schedulingSlack is what the supervisor's tests allow, beyond the
// configured timings, for the delay between an event and its observation
// on a loaded 2-core machine (CI's, and `make flake-hunt`'s, which runs a
// busy loop per core beside the test): a process's timer waking late, a
// signal's delivery and the process's death, and the test's own poll
// (every 10 ms) waking late under the race detector. A watchdog kill at a
// deadline of 800 ms was once seen 949 ms after the start, 149 ms late, on
// such a machine; the slack is a few times that, and each test's bound
// stays well short of the next thing the code would do if it were wrong
// (docs/development.md, "Timing bounds in tests", lists them).
//
// Only bounds on how late something happens get this slack. A bound that
// is a safety property (the child dead before its claim ends, no start
// before --start-delay) stays exact: the code itself leaves killAhead for
// those delays, and a test that fails there under load has found a bug.
const schedulingSlack = 500 * time.Millisecond
