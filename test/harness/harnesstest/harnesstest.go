// Package harnesstest adapts test/harness (and test/cluster) to tests: its
// helpers take a testing.TB and fail the test on error. It is apart from
// harness so that the benchmark and the demo, plain programs, do not link
// the testing package.
package harnesstest

import (
	"context"
	"testing"

	"github.com/leader-elector/leader-elector/test/cluster"
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

// LeaseHolder is cluster.ControlPlane.LeaseHolder: the holder the Lease
// names ("" if none); it fails the test if the Lease cannot be read.
func LeaseHolder(t testing.TB, cp *cluster.ControlPlane, namespace, name string) string {
	t.Helper()
	holder, err := cp.LeaseHolder(context.Background(), namespace, name)
	if err != nil {
		t.Fatal(err)
	}
	return holder
}
