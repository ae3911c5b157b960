// Package harness is the support the e2e tests, the benchmark (bench) and
// the local demo (test/demo) share: it finds the repository, builds
// leader-elector, picks free ports, and starts candidate processes and asks
// them through the api client.
//
// bench and the demo are plain programs, so nothing here imports testing:
// functions return errors, and test/e2e keeps a thin testing.TB adapter.
// It depends on api and the standard library (and apimachinery's wait); it
// imports no other package of this repository, so test/cluster and the
// rest can import it.
package harness
