package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/leader-elector/leader-elector/api"
)

// The tests of the supervisor against a fake sidecar (the API's answers
// are what the tests set) with real child processes and the real
// watchdog: the test binary runs as the watchdog when given WatchdogArg,
// and as `leader-elector run` when given "run".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == WatchdogArg {
		os.Exit(RunWatchdog(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	// A partition's supervisor, as `run --partitions` starts it.
	if len(os.Args) > 1 && os.Args[1] == "run" {
		os.Exit(Main(os.Args[2:], os.LookupEnv, os.Stdout, os.Stderr))
	}
	raiseParallel()
	os.Exit(m.Run())
}

// fakeSidecar answers GET /leader (and its long-poll) and POST /release
// from a state the test sets. While renewing, validUntil is validFor after
// each request, as a sidecar that renews all the time; stopRenewing fixes
// it, as a sidecar that can no longer renew but still answers.
type fakeSidecar struct {
	mu         sync.Mutex
	leader     bool
	token      int64
	rev        uint64
	validFor   time.Duration
	fixedUntil time.Time
	changed    chan struct{}
	releases   int
}

// newFakeSidecar's claims are 5 s long: a supervisor stops its child once
// the claim ends within --stop-grace without a fresh answer, and in CI's
// unit stage, with every package compiled and tested at once under -race on
// two cores, a supervisor went without one for 1.3 s of a 2 s claim (its
// child stopped and restarted, the test waiting for one child). The tests
// of a claim's end (stopRenewing) set validFor to 2 s, not to wait longer.
func newFakeSidecar(t *testing.T) (*fakeSidecar, *httptest.Server) {
	f := &fakeSidecar{rev: 1, validFor: 5 * time.Second, changed: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeSidecar) set(leader bool, token int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leader, f.token, f.fixedUntil = leader, token, time.Time{}
	f.rev++
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeSidecar) stopRenewing() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fixedUntil = time.Now().Add(f.validFor)
	return f.fixedUntil
}

func (f *fakeSidecar) state() api.Leader {
	l := api.Leader{Lease: api.Lease{Namespace: "default", Name: "app"}, Identity: "pod-a", FencingToken: f.token, Revision: f.rev, LeaseDurationSeconds: 15}
	if f.leader {
		l.Holder, l.IsLeader = "pod-a", true
		l.ValidUntil = api.Time{Time: time.Now().Add(f.validFor)}
		if !f.fixedUntil.IsZero() {
			l.ValidUntil = api.Time{Time: f.fixedUntil}
		}
		l.RenewTime = api.Time{Time: l.ValidUntil.Add(-f.validFor)}
	}
	return l
}

func (f *fakeSidecar) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if r.Method == http.MethodPost && r.URL.Path == "/release" {
		released := f.leader
		f.releases++
		f.leader, f.rev = false, f.rev+1
		close(f.changed)
		f.changed = make(chan struct{})
		out := api.Release{Leader: f.state(), Released: released}
		f.mu.Unlock()
		_ = json.NewEncoder(w).Encode(out)
		return
	}
	if rev := r.URL.Query().Get("revision"); rev == strconv.FormatUint(f.rev, 10) {
		ch := f.changed
		f.mu.Unlock()
		d, _ := time.ParseDuration(r.URL.Query().Get("wait"))
		select {
		case <-ch:
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		f.mu.Lock()
	}
	out := f.state()
	f.mu.Unlock()
	_ = json.NewEncoder(w).Encode(out)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type running struct {
	signals chan os.Signal
	code    chan int
	log     *syncBuffer
}

// startRunBackoff is the restart back-off of the supervisors that startRun
// starts.
const startRunBackoff = 200 * time.Millisecond

func startRun(t *testing.T, srv *httptest.Server, onExit string, grace time.Duration, command ...string) *running {
	return startRunWith(t, srv, func(*Config) {}, onExit, grace, command...)
}

func startRunWith(t *testing.T, srv *httptest.Server, change func(*Config), onExit string, grace time.Duration, command ...string) *running {
	t.Helper()
	if os.Getenv(isolatedEnv) == "" {
		t.Fatal("a test that runs the supervisor starts with `if !inOwnProcess(t) { return }` (see inOwnProcess)")
	}
	r := &running{signals: make(chan os.Signal, 4), code: make(chan int, 1), log: &syncBuffer{}}
	cfg := Config{
		Command:         command,
		API:             api.NewClient(srv.URL, &http.Client{Timeout: time.Second}),
		LongPoll:        api.NewClient(srv.URL, &http.Client{Timeout: time.Minute}),
		PollInterval:    50 * time.Millisecond,
		StopGrace:       grace,
		OnExit:          onExit,
		RestartBackoff:  startRunBackoff,
		WatchdogCommand: []string{os.Args[0], WatchdogArg},
		Clock:           systemClock{},
		Signals:         r.signals,
		Stderr:          r.log,
	}
	change(&cfg)
	runInBackground(t, "supervisor", r.log, r.code, func(ctx context.Context) int { return Run(ctx, cfg) })
	return r
}

// runInBackground runs run (Run or RunPartitions) on a context whose
// logger writes klog's text format into log, the buffer the tests read,
// and sends its exit code to code. At the test's end it cancels the
// context and waits for run to return: no supervisor outlives its test,
// or one still winding down would reap, as orphans of this process, the
// next test's exited children before their own supervisor's os/exec waits
// for them.
func runInBackground(t *testing.T, what string, log *syncBuffer, code chan<- int, run func(context.Context) int) {
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(log)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		code <- run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Errorf("the %s did not return within 10s of its cancel", what)
		}
		t.Logf("%s log:\n%s", what, log.String())
	})
}

func (r *running) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case c := <-r.code:
		return c
	case <-time.After(timeout):
		t.Fatalf("the supervisor did not exit within %v", timeout)
		return -1
	}
}

// alive reports whether pid is a process that has not exited (a zombie
// has exited).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func poll(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("%s: not within %v", what, timeout)
	}
}

func readPids(t *testing.T, path string) []int {
	b, _ := os.ReadFile(path)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

func TestRunFollowsLeadership(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	// An ignored signal stays ignored across exec: under nohup the child
	// would survive the SIGHUP this test forwards, and the test would time
	// out without saying why.
	if signal.Ignored(syscall.SIGHUP) {
		t.Fatal("SIGHUP is ignored in this process (started under nohup?); the child would inherit that and survive the forwarded SIGHUP: run the tests without nohup")
	}
	f, srv := newFakeSidecar(t)
	dir := t.TempDir()
	env, pids, terms := filepath.Join(dir, "env"), filepath.Join(dir, "pids"), filepath.Join(dir, "terms")
	script := `echo "$LEADER_ELECTOR_FENCING_TOKEN $LEADER_ELECTOR_LEASE $LEADER_ELECTOR_HOLDER $LEADER_ELECTOR_VALID_UNTIL" > ` + env + `
trap 'echo term >> ` + terms + `; exit 7' TERM
echo $$ >> ` + pids + `
while :; do sleep 0.02; done`
	r := startRun(t, srv, OnExitRelease, 500*time.Millisecond, "sh", "-c", script)

	// Not leading: nothing starts.
	time.Sleep(300 * time.Millisecond) // an absence: nothing to poll for
	if len(readPids(t, pids)) != 0 {
		t.Fatal("the child started while this pod did not lead")
	}
	f.set(true, 41)
	poll(t, 5*time.Second, "the child starts", func() bool { return len(readPids(t, pids)) == 1 })
	b, _ := os.ReadFile(env)
	fields := strings.Fields(string(b))
	if len(fields) != 4 || fields[0] != "41" || fields[1] != "default/app" || fields[2] != "pod-a" {
		t.Fatalf("the child's environment: %q", b)
	}
	if _, err := time.Parse(time.RFC3339Nano, fields[3]); err != nil {
		t.Fatalf("LEADER_ELECTOR_VALID_UNTIL %q: %v", fields[3], err)
	}
	first := readPids(t, pids)[0]

	// It keeps running while renewals go on, beyond several claims.
	time.Sleep(2500 * time.Millisecond) // an absence: the child must still be there
	if !alive(first) {
		t.Fatal("the child stopped while this pod kept leading")
	}

	// Losing leadership: SIGTERM, the child exits.
	f.set(false, 41)
	poll(t, 2*time.Second, "the child exits after the loss", func() bool { return !alive(first) })
	if b, _ := os.ReadFile(terms); string(b) != "term\n" {
		t.Fatalf("the child did not receive SIGTERM: %q", b)
	}

	// A new term: a new child with the new token.
	f.set(true, 42)
	poll(t, 5*time.Second, "a second child starts", func() bool { return len(readPids(t, pids)) == 2 })
	if b, _ := os.ReadFile(env); !strings.HasPrefix(string(b), "42 ") {
		t.Fatalf("the second child's token: %q", b)
	}
	second := readPids(t, pids)[1]

	// SIGHUP is forwarded (the script's default action: it dies of it,
	// and the supervisor, leading, releases and exits with 128+1).
	r.signals <- syscall.SIGHUP
	if code := r.exitCode(t, 5*time.Second); code != 128+int(syscall.SIGHUP) {
		t.Fatalf("exit code %d, want %d (the child's, killed by SIGHUP)", code, 128+int(syscall.SIGHUP))
	}
	if alive(second) {
		t.Fatal("the child outlived the supervisor")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releases != 1 {
		t.Fatalf("%d releases, want 1 (--on-exit=release)", f.releases)
	}
}

func TestRunShutdownPropagatesTheExitCode(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	pids := filepath.Join(t.TempDir(), "pids")
	r := startRun(t, srv, OnExitRelease, time.Second, "sh", "-c", `trap 'exit 5' TERM; echo $$ >> `+pids+`; while :; do sleep 0.02; done`)
	f.set(true, 1)
	poll(t, 5*time.Second, "the child starts", func() bool { return len(readPids(t, pids)) == 1 })
	r.signals <- syscall.SIGTERM
	if code := r.exitCode(t, 5*time.Second); code != 5 {
		t.Fatalf("exit code %d, want the child's 5", code)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.releases != 0 {
		t.Fatal("a shutdown released the leadership: the sidecar does that itself")
	}
}

func TestRunKillsAtTheDeadlineWhenRenewalsStop(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	f.validFor = 2 * time.Second
	pids := filepath.Join(t.TempDir(), "pids")
	const grace = 500 * time.Millisecond
	// The child ignores SIGTERM (and so does its sleep, which inherits it).
	r := startRun(t, srv, OnExitRelease, grace, "sh", "-c", `trap '' TERM; echo $$ >> `+pids+`; while :; do sleep 0.02; done`)
	f.set(true, 3)
	poll(t, 5*time.Second, "the child starts", func() bool { return len(readPids(t, pids)) == 1 })
	pid := readPids(t, pids)[0]
	until := f.stopRenewing()

	// SIGTERM at until-grace is ignored; SIGKILL at until. Seen from
	// outside, the death is known only to lie between two checks, and a
	// check may run late on a loaded machine: so the invariant asserted is
	// that no check begun after the claim's end found the child alive (the
	// time taken before a check that sees it alive is a moment it was).
	var lastSeenAlive time.Time
	poll(t, 5*time.Second, "the child dies", func() bool {
		checked := time.Now()
		if alive(pid) {
			lastSeenAlive = checked
			return false
		}
		return true
	})
	died := time.Now()
	if early := until.Sub(died); early > grace {
		t.Fatalf("the child died %v before the claim's end: the SIGTERM was not ignored?", early)
	}
	if late := lastSeenAlive.Sub(until); late > 0 {
		t.Fatalf("the child was alive %v after the claim's end", late)
	}
	t.Logf("the child was last seen alive %v before the claim's end, seen dead %v after it", until.Sub(lastSeenAlive), died.Sub(until))
	// The exit is logged after the death is seen from here: wait for it.
	// Either the supervisor's kill or the watchdog's, its backstop at the
	// claim's end when the supervisor's timer runs late, logs it.
	poll(t, 2*time.Second, "a log line says the child was killed", func() bool {
		return strings.Contains(r.log.String(), `result="killed by SIGKILL"`)
	})
	// The claim is over and not renewed: no new child.
	time.Sleep(500 * time.Millisecond) // an absence
	if n := len(readPids(t, pids)); n != 1 {
		t.Fatalf("%d children started on a lapsed claim", n)
	}
	r.signals <- syscall.SIGTERM
	if code := r.exitCode(t, 5*time.Second); code != 0 {
		t.Fatalf("exit code %d, want 0 (no child at shutdown)", code)
	}
}

func TestRunRefusesAStopGraceBeyondTheClaim(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	f.validFor = 2 * time.Second
	pids := filepath.Join(t.TempDir(), "pids")
	r := startRun(t, srv, OnExitRelease, 3*time.Second, "sh", "-c", `echo $$ >> `+pids)
	f.set(true, 1)
	if code := r.exitCode(t, 5*time.Second); code != ExitBadInput {
		t.Fatalf("exit code %d, want %d", code, ExitBadInput)
	}
	if log := r.log.String(); !strings.Contains(log, "--stop-grace does not fit in the claim") || !strings.Contains(log, `stopGrace="3s"`) {
		t.Fatalf("no clear log line")
	}
	if len(readPids(t, pids)) != 0 {
		t.Fatal("the child started")
	}
}

func TestRunOnExit(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	for _, tc := range []struct {
		onExit       string
		wantReleases int
	}{{OnExitRelease, 1}, {OnExitExit, 0}} {
		t.Run(tc.onExit, func(t *testing.T) {
			f, srv := newFakeSidecar(t)
			r := startRun(t, srv, tc.onExit, 500*time.Millisecond, "sh", "-c", "exit 3")
			f.set(true, 1)
			if code := r.exitCode(t, 5*time.Second); code != 3 {
				t.Fatalf("exit code %d, want the child's 3", code)
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.releases != tc.wantReleases {
				t.Fatalf("%d releases, want %d", f.releases, tc.wantReleases)
			}
		})
	}
	t.Run(OnExitRestart, func(t *testing.T) {
		f, srv := newFakeSidecar(t)
		starts := filepath.Join(t.TempDir(), "starts")
		r := startRun(t, srv, OnExitRestart, 500*time.Millisecond, "sh", "-c", `echo $$ >> `+starts+`; exit 3`)
		f.set(true, 1)
		// Back-off 200ms doubling: starts at about 0, 0.2, 0.6, 1.4, 3.0 s.
		poll(t, 10*time.Second, "four starts", func() bool { return len(readPids(t, starts)) >= 4 })
		begun := time.Now()
		// An absence: the fifth start comes 8 × RestartBackoff after the
		// fourth, which the poll saw up to schedulingSlack late; without
		// a back-off it would come at once.
		fifth := 8 * startRunBackoff
		time.Sleep(fifth - schedulingSlack)
		if n := len(readPids(t, starts)); n != 4 {
			t.Fatalf("%d starts within %v of the fourth (the fifth is due %v after it): no back-off", n, time.Since(begun), fifth)
		}
		r.signals <- syscall.SIGTERM
		if code := r.exitCode(t, 5*time.Second); code != 0 {
			t.Fatalf("exit code %d", code)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.releases != 0 {
			t.Fatal("restarting released the leadership")
		}
	})
}

func TestRunDelaysTheStartOfANewTerm(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	pids := filepath.Join(t.TempDir(), "pids")
	const delay = 800 * time.Millisecond
	r := startRunWith(t, srv, func(c *Config) { c.StartDelay = delay }, OnExitRelease, 300*time.Millisecond,
		"sh", "-c", `trap 'exit 0' TERM; echo $$ >> `+pids+`; while :; do sleep 0.02; done`)
	began := time.Now()
	f.set(true, 8)
	poll(t, 5*time.Second, "the child starts", func() bool { return len(readPids(t, pids)) == 1 })
	if d := time.Since(began); d < delay {
		t.Fatalf("the child started %v after the term began, before --start-delay %v", d, delay)
	}
	r.signals <- syscall.SIGTERM
	if code := r.exitCode(t, 5*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

func TestRunHooks(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	f, srv := newFakeSidecar(t)
	f.validFor = 2 * time.Second
	out := filepath.Join(t.TempDir(), "hooks")
	r := startRunWith(t, srv, func(c *Config) {
		c.OnStartLeading = `echo "start $LEADER_ELECTOR_FENCING_TOKEN $LEADER_ELECTOR_LEASE" >> ` + out
		c.OnStopLeading = `echo "stop $LEADER_ELECTOR_FENCING_TOKEN" >> ` + out + `; sleep 5; echo late >> ` + out
		c.HookTimeout = 300 * time.Millisecond
	}, OnExitRelease, 500*time.Millisecond) // no command: hooks only
	lines := func() string { b, _ := os.ReadFile(out); return string(b) }
	f.set(true, 12)
	poll(t, 5*time.Second, "the start hook runs", func() bool { return lines() == "start 12 default/app\n" })
	f.set(false, 12)
	poll(t, 5*time.Second, "the stop hook runs", func() bool { return lines() == "start 12 default/app\nstop 12\n" })
	poll(t, 5*time.Second, "the slow stop hook is killed at its timeout", func() bool {
		log := r.log.String()
		return strings.Contains(log, "Hook did not end within --hook-timeout: killed") && strings.Contains(log, `timeout="300ms"`)
	})
	// A new term while the sidecar answers: the next start.
	f.set(true, 13)
	poll(t, 5*time.Second, "the second start hook runs", func() bool { return strings.HasSuffix(lines(), "start 13 default/app\n") })
	if strings.Contains(lines(), "late") {
		t.Fatal("the killed hook went on")
	}
	// The claim runs out unrenewed: the stop hook, without the sidecar
	// saying so.
	f.stopRenewing()
	poll(t, 5*time.Second, "the stop hook runs when the claim lapses", func() bool { return strings.HasSuffix(lines(), "stop 13\n") })
	r.signals <- syscall.SIGTERM
	if code := r.exitCode(t, 5*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}
