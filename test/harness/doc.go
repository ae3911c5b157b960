// Package harness is the support the e2e tests, the benchmark (bench) and
// the local demo (test/demo) share: it finds the repository, builds
// leader-elector, picks free ports, starts candidate processes and asks
// them through the api client, and holds a Group of them that waits for
// exactly one leader and for the others to follow it.
//
// bench and the demo are plain programs, so nothing here imports testing:
// functions return errors, and harnesstest adapts them to testing.TB.
// It depends on api and the standard library (and apimachinery's wait); it
// imports no other package of this repository, so test/cluster and the
// rest can import it.
package harness
