package supervisor

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// The rules of the supervisor's loop, on a fake clock and without
// processes: each scenario feeds decide a sequence of events at given
// moments (milliseconds on CLOCK_MONOTONIC) and checks the actions it
// returns, and when it asks to be woken. The process-level tests
// (run_test.go and the others) prove the actions are carried out.

const never = -1

// step is one event at a moment, and what decide must answer.
type step struct {
	at time.Duration
	ev event
	// want are the actions, as describeActions writes them (notes left
	// out, but error notes).
	want []string
	// wake is when decide asks to be woken (never: not at all); zero: not
	// checked.
	wake time.Duration
}

const testRenewDeadline = 10 * time.Second

// claim is an answer of GET /leader sent and received at at: this pod
// leads in term token until at + validFor, with the default renew
// deadline.
func claim(token int64, rev uint64, at, validFor time.Duration) observed {
	until := wall0.Add(at + validFor)
	ms := validFor.Milliseconds()
	l := api.Leader{IsLeader: true, FencingToken: token, Revision: rev, LeaseDurationSeconds: 15, Holder: "pod-a", Identity: "pod-a",
		ValidUntil: api.Time{Time: until}, RenewTime: api.Time{Time: until.Add(-testRenewDeadline)}, ValidForMs: &ms}
	return observed{Observation{SentWall: wall0.Add(at), SentMono: Mono(at), RecvWall: wall0.Add(at), RecvMono: Mono(at), Leader: l}}
}

// follower is an answer that this pod does not lead.
func follower(rev uint64, at time.Duration) observed {
	return observed{Observation{SentWall: wall0.Add(at), SentMono: Mono(at), RecvMono: Mono(at), Leader: api.Leader{Revision: rev, Holder: "pod-b", Identity: "pod-a"}}}
}

func exited(code int) childExited {
	return childExited{pid: 42, code: code, result: fmt.Sprintf("exit code %d", code)}
}

func describeActions(acts []action) []string {
	var out []string
	for _, a := range acts {
		switch a := a.(type) {
		case note:
			if a.isError {
				out = append(out, "error: "+a.msg)
			}
		case fireHook:
			out = append(out, map[bool]string{true: "hook start", false: "hook stop"}[a.leading])
		case startChild:
			out = append(out, fmt.Sprintf("start token %d", a.term.Token))
		case armWatchdog:
			out = append(out, fmt.Sprintf("arm %v", time.Duration(a.at)))
		case stopChild:
			out = append(out, fmt.Sprintf("%s, SIGKILL in %v: %s", signalName(a.sig), a.killIn, a.reason))
		case killChild:
			out = append(out, "SIGKILL")
		case killRemains:
			out = append(out, "kill remains")
		case reapOrphaned:
			out = append(out, "reap")
		case forward:
			out = append(out, "forward "+signalName(a.sig))
		case release:
			out = append(out, "release")
		case abort:
			out = append(out, "abort")
		case exit:
			out = append(out, fmt.Sprintf("exit %d", a.code))
		default:
			out = append(out, fmt.Sprintf("%T", a))
		}
	}
	return out
}

// play runs steps through decide from the initial state and returns the
// final state.
func play(t *testing.T, r rules, steps []step) state {
	t.Helper()
	s := r.initial()
	for i, st := range steps {
		var acts []action
		s, acts = r.decide(s, st.ev, Mono(st.at))
		got := describeActions(acts)
		if strings.Join(got, " | ") != strings.Join(st.want, " | ") {
			t.Errorf("step %d (%T at %v): actions\n  %q\nwant\n  %q", i, st.ev, st.at, got, st.want)
		}
		for j, a := range acts {
			if _, ok := a.(exit); ok && j != len(acts)-1 {
				t.Errorf("step %d: an exit before other actions: %q", i, got)
			}
		}
		if st.wake != 0 {
			wake := r.wakeAt(s, Mono(st.at))
			if want := Mono(st.wake); st.wake == never {
				if wake != -1 {
					t.Errorf("step %d: wake at %v, want never", i, time.Duration(wake))
				}
			} else if wake != want {
				t.Errorf("step %d: wake at %v, want %v", i, time.Duration(wake), st.wake)
			}
		}
	}
	return s
}

var defaultRules = rules{hasCommand: true, stopGrace: 2 * time.Second, startDelay: time.Second, onExit: OnExitRelease, restartBackoff: time.Second}

const ms = time.Millisecond

func TestDecide(t *testing.T) {
	noDelay := defaultRules
	noDelay.startDelay = 0
	for _, tc := range []struct {
		name  string
		rules rules
		steps []step
	}{
		{"a term: the child starts after --start-delay, follows renewals, and gets SIGTERM at the loss", defaultRules, []step{
			{at: 0, ev: wake{}, want: nil, wake: never},
			{at: 0, ev: follower(1, 0), want: nil, wake: never},
			// The start hook at once; the child after --start-delay.
			{at: 1000 * ms, ev: claim(5, 2, 1000*ms, 10*time.Second), want: []string{"hook start"}, wake: 2000 * ms},
			{at: 2000 * ms, ev: wake{}, want: []string{"start token 5"}, wake: 8900 * ms}, // SIGTERM moment: 11 s − 100 ms − --stop-grace
			// A renewal moves the SIGKILL moment, and the watchdog's.
			{at: 5000 * ms, ev: claim(5, 2, 5000*ms, 10*time.Second), want: []string{"arm 14.9s"}, wake: 12900 * ms},
			// A failed read teaches nothing.
			{at: 5500 * ms, ev: observed{Observation{SentMono: Mono(5500 * ms), Err: errors.New("refused")}}, want: nil, wake: 12900 * ms},
			// The loss: the stop hook, SIGTERM, SIGKILL after --stop-grace.
			{at: 6000 * ms, ev: follower(3, 6000*ms), want: []string{"hook stop", "arm 8s", "SIGTERM, SIGKILL in 2s: this pod stopped leading"}, wake: 8000 * ms},
			// It exits within its grace: what it left is killed; nothing
			// else happens.
			{at: 6300 * ms, ev: exited(7), want: []string{"kill remains"}, wake: never},
		}},
		{"the claim runs out unrenewed: SIGTERM --stop-grace before its end, SIGKILL 100ms before it", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}, wake: 7900 * ms},
			{at: 7900 * ms, ev: wake{}, want: []string{"SIGTERM, SIGKILL in 2s: the claim ends within --stop-grace and was not renewed"}, wake: 9900 * ms},
			// A renewal after the stop began does not save the child: it is
			// already stopping.
			{at: 8000 * ms, ev: claim(1, 1, 8000*ms, 10*time.Second), want: nil, wake: 9900 * ms},
			{at: 9900 * ms, ev: wake{}, want: []string{"SIGKILL"}},
			// Once it is gone, the renewed claim starts the next one.
			{at: 9950 * ms, ev: exited(128 + 9), want: []string{"kill remains", "start token 1"}},
		}},
		{"the SIGTERM moment missed (a late timer, a paused supervisor): SIGTERM and SIGKILL at once", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 9900 * ms, ev: wake{}, want: []string{"SIGTERM, SIGKILL in 0s: the claim ends within --stop-grace and was not renewed", "SIGKILL"}, wake: 10 * time.Second},
			// The claim's end: the stop hook, as the sidecar said nothing.
			{at: 10 * time.Second, ev: wake{}, want: []string{"hook stop"}, wake: never},
		}},
		{"the stop's grace never goes beyond the claim", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			// The loss comes 1.95 s before the SIGKILL moment (the
			// SIGTERM moment was missed), less than --stop-grace.
			{at: 7950 * ms, ev: follower(2, 7950*ms), want: []string{"hook stop", "SIGTERM, SIGKILL in 1.95s: this pod stopped leading"}, wake: 9900 * ms},
		}},
		{"a new term: the old child stops, the new one starts after --start-delay", defaultRules, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"hook start"}},
			{at: 1000 * ms, ev: wake{}, want: []string{"start token 5"}},
			{at: 3000 * ms, ev: claim(6, 2, 3000*ms, 10*time.Second), want: []string{"arm 5s", "SIGTERM, SIGKILL in 2s: a new term began"}, wake: 5000 * ms},
			{at: 3300 * ms, ev: exited(0), want: []string{"kill remains"}, wake: 4000 * ms},
			{at: 4000 * ms, ev: wake{}, want: []string{"start token 6"}, wake: 10900 * ms},
		}},
		{"a --stop-grace that does not fit in the renew deadline: exit 2 before any child", rules{hasCommand: true, stopGrace: 9950 * ms, onExit: OnExitRelease, restartBackoff: time.Second}, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "error: The --stop-grace does not fit in the claim: give one well below the sidecar's renew deadline (validUntil − renewTime); the child is killed 100ms before the claim ends", "exit 2"}},
		}},
		{"a claim too short to hold --stop-grace starts nothing until renewed", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 2100*ms), want: []string{"hook start"}, wake: 2100 * ms},
			{at: 1000 * ms, ev: claim(1, 1, 1000*ms, 10*time.Second), want: []string{"start token 1"}},
		}},
		{"--on-exit=release: the child's own exit releases and exits with its code", defaultRules, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start"}},
			{at: 1000 * ms, ev: wake{}, want: []string{"start token 1"}},
			{at: 1500 * ms, ev: exited(3), want: []string{"kill remains", "release", "exit 3"}},
		}},
		{"--on-exit=exit: exits with the child's code, keeping the leadership", rules{hasCommand: true, stopGrace: 2 * time.Second, onExit: OnExitExit, restartBackoff: time.Second}, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 500 * ms, ev: exited(3), want: []string{"kill remains", "exit 3"}},
		}},
		{"--on-exit=restart: the back-off doubles up to 30s; a run longer than that resets it", rules{hasCommand: true, stopGrace: 2 * time.Second, onExit: OnExitRestart, restartBackoff: 10 * time.Second}, []step{
			{at: 0, ev: claim(1, 1, 0, 14*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 1 * time.Second, ev: claim(1, 1, 1*time.Second, 14*time.Second), want: []string{"arm 14.9s"}},
			{at: 1 * time.Second, ev: exited(3), want: []string{"kill remains"}, wake: 11 * time.Second}, // 10 s
			{at: 10 * time.Second, ev: claim(1, 1, 10*time.Second, 14*time.Second), want: nil, wake: 11 * time.Second},
			{at: 11 * time.Second, ev: wake{}, want: []string{"start token 1"}},
			{at: 12 * time.Second, ev: exited(3), want: []string{"kill remains"}, wake: 24 * time.Second}, // 20 s; the claim ends first
			{at: 25 * time.Second, ev: claim(1, 1, 25*time.Second, 14*time.Second), want: nil, wake: 32 * time.Second},
			{at: 32 * time.Second, ev: wake{}, want: []string{"start token 1"}},
			{at: 33 * time.Second, ev: exited(3), want: []string{"kill remains"}, wake: 39 * time.Second},
			// The cap: 30 s, not 40 s.
			{at: 60 * time.Second, ev: claim(1, 1, 60*time.Second, 14*time.Second), want: nil, wake: 63 * time.Second},
			{at: 63 * time.Second, ev: wake{}, want: []string{"start token 1"}},
			// A run of 32 s resets it to its first delay.
			{at: 95 * time.Second, ev: claim(1, 1, 95*time.Second, 14*time.Second), want: []string{"arm 1m48.9s"}},
			{at: 95 * time.Second, ev: exited(3), want: []string{"kill remains"}, wake: 105 * time.Second},
		}},
		{"the watchdog killed the child while the supervisor was paused: a stop, not an exit; it starts again on a renewed claim", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 9950 * ms, ev: claim(1, 1, 9950*ms, 10*time.Second), want: []string{"arm 19.85s"}},
			{at: 9960 * ms, ev: childExited{pid: 42, code: 137, result: "killed by SIGKILL", fired: true}, want: []string{"kill remains", "start token 1"}},
		}},
		{"SIGTERM: the child gets it, the stop hook runs, the supervisor exits with the child's code", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 1000 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"arm 3s", "SIGTERM, SIGKILL in 2s: the supervisor is stopping", "hook stop"}, wake: 3000 * ms},
			// A second one changes nothing; renewals no longer extend.
			{at: 1100 * ms, ev: signaled{syscall.SIGTERM}, want: nil},
			{at: 1200 * ms, ev: claim(1, 1, 1200*ms, 10*time.Second), want: nil, wake: 3000 * ms},
			{at: 1500 * ms, ev: exited(5), want: []string{"kill remains", "exit 5"}},
		}},
		{"SIGINT is passed on as SIGINT", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 1000 * ms, ev: signaled{syscall.SIGINT}, want: []string{"arm 3s", "SIGINT, SIGKILL in 2s: the supervisor is stopping", "hook stop"}},
			{at: 3000 * ms, ev: wake{}, want: []string{"SIGKILL"}},
			{at: 3010 * ms, ev: exited(128 + 9), want: []string{"kill remains", "exit 137"}},
		}},
		{"SIGTERM without a child: exit 0", defaultRules, []step{
			{at: 0, ev: follower(1, 0), want: nil},
			{at: 100 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"exit 0"}},
		}},
		{"SIGTERM while leading without a child yet: the stop hook, then exit 0", defaultRules, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start"}},
			{at: 100 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"hook stop", "exit 0"}},
		}},
		{"a shutdown does not restart the child", rules{hasCommand: true, stopGrace: 2 * time.Second, onExit: OnExitRestart, restartBackoff: time.Second}, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 100 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"arm 2.1s", "SIGTERM, SIGKILL in 2s: the supervisor is stopping", "hook stop"}},
			{at: 200 * ms, ev: exited(0), want: []string{"kill remains", "exit 0"}},
		}},
		{"other signals go to the child while it runs, and nowhere otherwise", noDelay, []step{
			{at: 0, ev: signaled{syscall.SIGHUP}, want: nil},
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 100 * ms, ev: signaled{syscall.SIGHUP}, want: []string{"forward SIGHUP"}},
			{at: 200 * ms, ev: signaled{syscall.SIGUSR1}, want: []string{"forward SIGUSR1"}},
			{at: 9900 * ms, ev: wake{}, want: []string{"SIGTERM, SIGKILL in 0s: the claim ends within --stop-grace and was not renewed", "SIGKILL"}},
			{at: 9901 * ms, ev: signaled{syscall.SIGUSR2}, want: nil},
		}},
		{"SIGCHLD reaps the orphans", defaultRules, []step{
			{at: 0, ev: orphaned{}, want: []string{"reap"}},
		}},
		{"a cancelled context kills the child and exits 1", noDelay, []step{
			{at: 0, ev: claim(1, 1, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 100 * ms, ev: cancelled{}, want: []string{"abort", "exit 1"}},
		}},
		{"a cancelled context without a child exits 1", noDelay, []step{
			{at: 100 * ms, ev: cancelled{}, want: []string{"exit 1"}},
		}},
		{"hooks only: no child; the stop hook when the claim runs out unrenewed", rules{stopGrace: 2 * time.Second, onExit: OnExitRelease, restartBackoff: time.Second}, []step{
			{at: 0, ev: claim(12, 1, 0, 10*time.Second), want: []string{"hook start"}, wake: 10 * time.Second},
			{at: 5 * time.Second, ev: claim(12, 1, 5*time.Second, 10*time.Second), want: nil, wake: 15 * time.Second},
			{at: 15 * time.Second, ev: wake{}, want: []string{"hook stop"}, wake: never},
			{at: 16 * time.Second, ev: claim(13, 2, 16*time.Second, 10*time.Second), want: []string{"hook start"}},
		}},
		{"an answer of an older revision is ignored", noDelay, []step{
			{at: 0, ev: claim(1, 5, 0, 10*time.Second), want: []string{"hook start", "start token 1"}},
			{at: 100 * ms, ev: follower(4, 100*ms), want: nil},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { play(t, tc.rules, tc.steps) })
	}
}

// TestDecideIsPure: decide changes nothing it is given; the state it
// returns shares nothing with the one it took.
func TestDecideIsPure(t *testing.T) {
	r := defaultRules
	r.startDelay = 0
	s, _ := r.decide(r.initial(), claim(1, 1, 0, 10*time.Second), 0)
	before := *s.child
	next, _ := r.decide(s, follower(2, time.Second), Mono(time.Second))
	if *s.child != before {
		t.Errorf("decide changed the child of the state it was given: %+v, was %+v", *s.child, before)
	}
	if !next.child.stopping || next.child == s.child {
		t.Errorf("the returned state's child %+v: want a stopping copy", *next.child)
	}
}

// drained is claim with the partition draining, to be handed over drainIn
// after at.
func drained(token int64, rev uint64, at, validFor, drainIn time.Duration) observed {
	o := claim(token, rev, at, validFor)
	o.o.Draining, o.o.DrainDeadline = true, wall0.Add(at+drainIn)
	return o
}

// TestDecidePartition: the rules of one partition term's supervisor (run
// --partitions).
func TestDecidePartition(t *testing.T) {
	r := defaultRules
	r.partition, r.startDelay = true, 0
	restart := r
	restart.onExit = OnExitRestart
	for _, tc := range []struct {
		name  string
		rules rules
		steps []step
	}{
		{"a drain: SIGTERM at once, SIGKILL 100ms before its deadline; the exit releases the partition and ends", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: drained(5, 2, 1000*ms, 10*time.Second, 5*time.Second), want: []string{"arm 5.9s", "SIGTERM, SIGKILL in 4.9s: the partition is draining"}, wake: 5900 * ms},
			{at: 1500 * ms, ev: exited(0), want: []string{"kill remains", "release", "exit 0"}},
		}},
		{"a drain longer than the claim: renewals carry the SIGKILL moment to the drain's deadline", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: drained(5, 2, 1000*ms, 10*time.Second, 30*time.Second), want: []string{"arm 10.9s", "SIGTERM, SIGKILL in 9.9s: the partition is draining"}, wake: 10900 * ms},
			{at: 5000 * ms, ev: drained(5, 2, 5000*ms, 10*time.Second, 26*time.Second), want: []string{"arm 14.9s"}, wake: 14900 * ms},
			{at: 29000 * ms, ev: drained(5, 2, 29000*ms, 10*time.Second, 2*time.Second), want: []string{"arm 30.9s"}, wake: 30900 * ms},
		}},
		{"the term ends during a drain: --stop-grace from then, not the drain's deadline", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: drained(5, 2, 1000*ms, 10*time.Second, 30*time.Second), want: []string{"arm 10.9s", "SIGTERM, SIGKILL in 9.9s: the partition is draining"}},
			{at: 1300 * ms, ev: follower(3, 1300*ms), want: []string{"arm 3.3s"}, wake: 3300 * ms},
			{at: 3300 * ms, ev: wake{}, want: []string{"SIGKILL"}},
		}},
		{"SIGTERM during a drain: --stop-grace from then", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: drained(5, 2, 1000*ms, 10*time.Second, 30*time.Second), want: []string{"arm 10.9s", "SIGTERM, SIGKILL in 9.9s: the partition is draining"}},
			{at: 1200 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"arm 3.2s"}, wake: 3200 * ms},
		}},
		{"a drain's SIGKILL never comes after the claim's", r, []step{
			{at: 0, ev: claim(5, 1, 0, 3*time.Second), want: []string{"start token 5"}},
			{at: 500 * ms, ev: drained(5, 2, 500*ms, 2500*ms, 10*time.Second), want: []string{"SIGTERM, SIGKILL in 2.4s: the partition is draining"}, wake: 2900 * ms},
			{at: 2900 * ms, ev: wake{}, want: []string{"SIGKILL"}},
			{at: 2950 * ms, ev: exited(137), want: []string{"kill remains", "release", "exit 0"}},
		}},
		{"the term ends (taken, or run out): the child stops; its exit ends the supervisor, the release is refused harmlessly", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: follower(2, 1000*ms), want: []string{"arm 3s", "SIGTERM, SIGKILL in 2s: this pod stopped leading"}},
			{at: 1200 * ms, ev: exited(0), want: []string{"kill remains", "release", "exit 0"}},
		}},
		{"the child's own exit (release): the partition goes back, the child's code", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 700 * ms, ev: exited(3), want: []string{"kill remains", "release", "exit 3"}},
		}},
		{"the child's own exit (restart): it starts again within the term", restart, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 700 * ms, ev: exited(3), want: []string{"kill remains"}, wake: 1700 * ms},
			{at: 1700 * ms, ev: wake{}, want: []string{"start token 5"}},
		}},
		{"a drain during the restart's back-off: released at once, nothing started", restart, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 700 * ms, ev: exited(3), want: []string{"kill remains"}, wake: 1700 * ms},
			{at: 1000 * ms, ev: drained(5, 2, 1000*ms, 10*time.Second, 5*time.Second), want: []string{"release", "exit 0"}},
		}},
		{"the term is over before a child ran: nothing to supervise", r, []step{
			{at: 0, ev: wake{}, want: nil, wake: never},
			{at: 10 * ms, ev: follower(1, 10*ms), want: []string{"exit 0"}},
		}},
		{"SIGTERM: the child stops within --stop-grace, the partition is released, the child's code", r, []step{
			{at: 0, ev: claim(5, 1, 0, 10*time.Second), want: []string{"start token 5"}},
			{at: 1000 * ms, ev: signaled{syscall.SIGTERM}, want: []string{"arm 3s", "SIGTERM, SIGKILL in 2s: the supervisor is stopping"}},
			{at: 1100 * ms, ev: exited(143), want: []string{"kill remains", "release", "exit 143"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { play(t, tc.rules, tc.steps) })
	}
}
