// Package harnesstest adapts test/harness to tests: its helpers take a
// testing.TB and fail the test on error. It is apart from harness so that
// the benchmark and the demo, plain programs, do not link the testing
// package.
package harnesstest

import (
	"testing"

	"github.com/leader-elector/leader-elector/test/harness"
)

// FreePorts is harness.FreePorts; it fails the test if no port is free.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := harness.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}
