package leasetest

import (
	"flag"
	"strconv"
	"testing"
)

// RunParallel runs m's tests with up to n of those marked t.Parallel at
// once, unless -parallel was given, and returns m.Run's exit code; call it
// from TestMain. It is for packages whose tests run client-go's elector,
// which has no clock to inject: each test waits seconds of real time (a
// lease duration, retry periods) and uses little CPU, so the default of
// one test per CPU would keep a 2-core machine idle through most of the
// package's run.
func RunParallel(m *testing.M, n int) int {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
	return m.Run()
}
