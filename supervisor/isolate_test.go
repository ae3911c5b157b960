package supervisor

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"
)

// isolatedEnv names, in a test process started by inOwnProcess, the one
// test it runs.
const isolatedEnv = "LEADER_ELECTOR_SUPERVISOR_TEST"

// inOwnProcess runs the calling test in a test process of its own, in
// parallel with the other tests, and reports whether the caller is that
// process (and so runs the test's body): `if !inOwnProcess(t) { return }`.
//
// Every test that runs the supervisor needs it. Run makes its process a
// child subreaper and reaps orphans on SIGCHLD; two supervisors in one
// process would reap each other's children before their own os/exec waits
// for them. In processes of their own they do not meet, and run in
// parallel: they mostly wait on timers, so the package's tests take about
// as long as the longest one instead of the sum of them.
func inOwnProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) == t.Name() {
		return true
	}
	t.Parallel()
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.count=1", "-test.v"}
	if deadline, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(deadline).String())
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), isolatedEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	// The verdict is the child's own line for this test: a test process
	// that ran nothing (a renamed test) exits 0 as well.
	if err != nil || !bytes.Contains(out, []byte("--- PASS: "+t.Name()+" ")) {
		t.Fatalf("%s in its own process: %v\n%s", t.Name(), err, out)
	}
	if testing.Verbose() {
		t.Logf("%s in its own process:\n%s", t.Name(), out)
	}
	return false
}

// raiseParallel lets the tests that run in processes of their own all
// wait at once: go test runs at most -test.parallel (GOMAXPROCS, 2 on a
// small machine) parallel tests at a time, a limit made for tests that use
// the CPU, while these sleep. An explicit -test.parallel wins.
func raiseParallel() {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", "16")
	}
}
