package election

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/leadership"
)

const (
	testNamespace     = "default"
	testName          = "my-app"
	testIdentity      = "pod-a"
	testRenewDeadline = 10 * time.Second
	testLeaseDuration = 15 * time.Second
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// asyncClock is a FakeClock whose AfterFunc callbacks run on their own
// goroutine, as time.AfterFunc's do. FakeClock itself runs them synchronously
// while holding its own lock, and the tracker's callback reads the clock, so
// with a bare FakeClock stepping past a deadline would deadlock.
type asyncClock struct {
	*clocktesting.FakeClock
}

func (c asyncClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.FakeClock.AfterFunc(d, func() { go f() })
}

func newTestClock() asyncClock {
	return asyncClock{clocktesting.NewFakeClock(t0)}
}

func newTestTracker(t *testing.T) (*tracker, asyncClock) {
	t.Helper()
	clk := newTestClock()
	tr := newTracker(clk, testNamespace, testName, testIdentity, testRenewDeadline, testLeaseDuration)
	t.Cleanup(tr.stop)
	return tr, clk
}

// own is a record naming this pod.
func own(token int64, renew time.Time) record {
	return record{holder: testIdentity, transitions: token, durationSeconds: 15, renewTime: renew}
}

// other is a record naming another pod.
func other(holder string, token int64, renew time.Time) record {
	return record{holder: holder, transitions: token, durationSeconds: 15, renewTime: renew}
}

// waitClosed fails the test unless ch is closed within a generous deadline.
func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatalf("%s: watch channel not closed", what)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestTrackerLeadershipIsTimeBounded(t *testing.T) {
	for _, tc := range []struct {
		name string
		// writeTook is how long the successful write took: the claim is
		// measured from its start.
		writeTook time.Duration
		// readAt is the read's offset from the start of the write.
		readAt     time.Duration
		wantLeader bool
	}{
		{name: "right after the write", readAt: 0, wantLeader: true},
		{name: "just before the deadline", readAt: testRenewDeadline - time.Nanosecond, wantLeader: true},
		{name: "at the deadline", readAt: testRenewDeadline, wantLeader: false},
		{name: "long after the deadline", readAt: time.Hour, wantLeader: false},
		{name: "slow write, just before the deadline", writeTook: 3 * time.Second, readAt: testRenewDeadline - time.Nanosecond, wantLeader: true},
		{name: "slow write, deadline counts from its start", writeTook: 3 * time.Second, readAt: testRenewDeadline, wantLeader: false},
		{name: "write that returned after the deadline", writeTook: testRenewDeadline, readAt: testRenewDeadline, wantLeader: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			start := clk.Now()
			clk.Step(tc.writeTook)
			tr.observeWrite(start, own(3, start))
			// SetTime does not wait for the timer's callback: the answer
			// must come from the read itself.
			clk.SetTime(start.Add(tc.readAt))

			s := tr.Snapshot()
			if s.IsLeader != tc.wantLeader {
				t.Errorf("IsLeader = %v, want %v", s.IsLeader, tc.wantLeader)
			}
			if tc.wantLeader {
				if want := start.Add(testRenewDeadline); !s.ValidUntil.Equal(want) {
					t.Errorf("ValidUntil = %v, want %v (renewal start + renew deadline)", s.ValidUntil, want)
				}
				if s.Holder != testIdentity {
					t.Errorf("Holder = %q, want %q", s.Holder, testIdentity)
				}
				if s.LeaderSince.IsZero() {
					t.Error("LeaderSince is zero for a leader")
				}
			} else {
				if !s.ValidUntil.IsZero() || !s.LeaderSince.IsZero() {
					t.Errorf("ValidUntil = %v, LeaderSince = %v; want both zero when not leading", s.ValidUntil, s.LeaderSince)
				}
			}
			if s.FencingToken != 3 {
				t.Errorf("FencingToken = %d, want 3", s.FencingToken)
			}
			if got := tr.claimLapsed(); got == tc.wantLeader {
				t.Errorf("claimLapsed() = %v while IsLeader = %v", got, s.IsLeader)
			}
		})
	}
}

// TestTrackerRevision walks one tracker through a sequence of events; the
// revision must grow by one exactly when the holder, leadership, fencing
// token or start of leadership change.
func TestTrackerRevision(t *testing.T) {
	tr, clk := newTestTracker(t)
	var firstLeaderSince time.Time
	steps := []struct {
		name        string
		do          func()
		wantBump    bool
		wantHolder  string
		wantLeader  bool
		wantToken   int64
		checkExtras func(t *testing.T, s leadership.State)
	}{
		{
			name:     "initial state",
			do:       func() {},
			wantBump: false,
		},
		{
			name:     "lease not found",
			do:       tr.observeNotFound,
			wantBump: false,
		},
		{
			name:       "another pod holds the lease",
			do:         func() { tr.observeRead(other("pod-b", 1, clk.Now())) },
			wantBump:   true,
			wantHolder: "pod-b",
			wantToken:  1,
		},
		{
			name: "the other pod renews",
			do: func() {
				clk.Step(2 * time.Second)
				tr.observeRead(other("pod-b", 1, clk.Now()))
			},
			wantBump:   false,
			wantHolder: "pod-b",
			wantToken:  1,
		},
		{
			name:       "the same record read again",
			do:         func() { tr.observeRead(other("pod-b", 1, t0.Add(2*time.Second))) },
			wantBump:   false,
			wantHolder: "pod-b",
			wantToken:  1,
		},
		{
			name:       "a third pod takes over",
			do:         func() { tr.observeRead(other("pod-c", 2, clk.Now())) },
			wantBump:   true,
			wantHolder: "pod-c",
			wantToken:  2,
		},
		{
			name:       "the third pod releases",
			do:         func() { tr.observeRead(record{transitions: 2, durationSeconds: 1, renewTime: clk.Now()}) },
			wantBump:   true,
			wantHolder: "",
			wantToken:  2,
		},
		{
			name: "this pod acquires",
			do: func() {
				clk.Step(time.Second)
				tr.observeWrite(clk.Now(), own(3, clk.Now()))
			},
			wantBump:   true,
			wantHolder: testIdentity,
			wantLeader: true,
			wantToken:  3,
			checkExtras: func(t *testing.T, s leadership.State) {
				if !s.LeaderSince.Equal(clk.Now()) {
					t.Errorf("LeaderSince = %v, want the time of the acquisition %v", s.LeaderSince, clk.Now())
				}
				firstLeaderSince = s.LeaderSince
			},
		},
		{
			name: "this pod renews",
			do: func() {
				clk.Step(2 * time.Second)
				tr.observeWrite(clk.Now(), own(3, clk.Now()))
			},
			wantBump:   false,
			wantHolder: testIdentity,
			wantLeader: true,
			wantToken:  3,
			checkExtras: func(t *testing.T, s leadership.State) {
				if !s.LeaderSince.Equal(firstLeaderSince) {
					t.Errorf("LeaderSince = %v after a renewal, want it unchanged (%v)", s.LeaderSince, firstLeaderSince)
				}
			},
		},
		{
			name:       "this pod reads back its own write",
			do:         func() { tr.observeRead(own(3, clk.Now())) },
			wantBump:   false,
			wantHolder: testIdentity,
			wantLeader: true,
			wantToken:  3,
		},
		{
			name:       "time passes within the renew deadline",
			do:         func() { clk.Step(testRenewDeadline - time.Nanosecond) },
			wantBump:   false,
			wantHolder: testIdentity,
			wantLeader: true,
			wantToken:  3,
		},
		{
			name:       "the renew deadline passes without a renewal",
			do:         func() { clk.Step(time.Nanosecond) },
			wantBump:   true,
			wantHolder: testIdentity, // still named in the Lease, which has not expired
			wantLeader: false,
			wantToken:  3,
		},
		{
			// The claim ended under token 3 (routing withdrawn under it):
			// a write of that term, sent before and answered after the
			// deadline, does not resume it.
			name: "a renewal answered after the lapse does not resume the claim",
			do: func() {
				clk.Step(time.Second)
				tr.observeWrite(clk.Now(), own(3, clk.Now()))
			},
			wantBump:   false,
			wantHolder: testIdentity,
			wantLeader: false,
			wantToken:  3,
		},
		{
			name: "taking the Lease back starts a new claim with a larger token",
			do: func() {
				tr.observeWrite(clk.Now(), own(4, clk.Now()))
			},
			wantBump:   true,
			wantHolder: testIdentity,
			wantLeader: true,
			wantToken:  4,
			checkExtras: func(t *testing.T, s leadership.State) {
				if !s.LeaderSince.Equal(clk.Now()) || s.LeaderSince.Equal(firstLeaderSince) {
					t.Errorf("LeaderSince = %v, want the new claim's start %v", s.LeaderSince, clk.Now())
				}
			},
		},
		{
			name:       "claims turned off",
			do:         func() { tr.setClaiming(false, leadership.ReasonReleased) },
			wantBump:   true,
			wantHolder: testIdentity,
			wantLeader: false,
			wantToken:  4,
		},
		{
			name:       "claims turned off again",
			do:         func() { tr.setClaiming(false, leadership.ReasonReleased) },
			wantBump:   false,
			wantHolder: testIdentity,
			wantLeader: false,
			wantToken:  4,
		},
		{
			name:       "this pod releases the lease",
			do:         func() { tr.observeRelease(record{transitions: 4, durationSeconds: 1, renewTime: clk.Now()}) },
			wantBump:   true,
			wantHolder: "",
			wantLeader: false,
			wantToken:  4,
		},
		{
			name:       "stopped leading without a change",
			do:         func() { tr.stoppedLeading() },
			wantBump:   false,
			wantHolder: "",
			wantToken:  4,
		},
	}
	prev, changed := tr.Watch()
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do()
			bumped := isClosed(changed)
			s, ch := tr.Watch()
			if s.Revision != prev.Revision && s.Revision != prev.Revision+1 {
				t.Fatalf("Revision went from %d to %d, want +0 or +1", prev.Revision, s.Revision)
			}
			if got := s.Revision == prev.Revision+1; got != step.wantBump {
				t.Errorf("Revision %d -> %d, want bump = %v", prev.Revision, s.Revision, step.wantBump)
			}
			// A bump must have been announced to watchers; a read alone
			// may be what published it (time-bounded changes).
			if step.wantBump && !isClosed(changed) {
				t.Error("revision bumped but the previous watch channel is open")
			}
			if !step.wantBump && bumped {
				t.Error("watch channel closed without a change")
			}
			if s.Holder != step.wantHolder || s.IsLeader != step.wantLeader || s.FencingToken != step.wantToken {
				t.Errorf("holder, isLeader, token = %q, %v, %d; want %q, %v, %d", s.Holder, s.IsLeader, s.FencingToken, step.wantHolder, step.wantLeader, step.wantToken)
			}
			if step.checkExtras != nil {
				step.checkExtras(t, s)
			}
			prev, changed = s, ch
		})
	}
}

func TestTrackerTimerWakesWatchers(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setUp brings the tracker into a state that changes by itself
		// after step.
		setUp      func(tr *tracker, clk asyncClock)
		step       time.Duration
		wantHolder string
		wantLeader bool
	}{
		{
			name: "leadership ends at the renew deadline",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeWrite(clk.Now(), own(4, clk.Now()))
			},
			step:       testRenewDeadline + time.Millisecond,
			wantHolder: testIdentity,
			wantLeader: false,
		},
		{
			name: "another holder expires after the lease duration",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
			},
			step:       15*time.Second + time.Millisecond,
			wantHolder: "",
		},
		{
			name: "our own lease expires after the lease duration",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeWrite(clk.Now(), own(4, clk.Now()))
				// Publish the end of leadership, so that the next change
				// is the expiry.
				clk.Step(testRenewDeadline)
				if tr.Snapshot().IsLeader {
					panic("still leader after the renew deadline")
				}
			},
			step:       5*time.Second + time.Millisecond,
			wantHolder: "",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tc.setUp(tr, clk)
			before, changed := tr.Watch()
			clk.Step(tc.step)
			// Nothing reads the tracker here: only its timer can close the
			// channel.
			waitClosed(t, changed, "after stepping the clock")
			s := tr.Snapshot()
			if s.Revision != before.Revision+1 {
				t.Errorf("Revision = %d, want %d", s.Revision, before.Revision+1)
			}
			if s.Holder != tc.wantHolder || s.IsLeader != tc.wantLeader {
				t.Errorf("holder, isLeader = %q, %v; want %q, %v", s.Holder, s.IsLeader, tc.wantHolder, tc.wantLeader)
			}
			if s.FencingToken != 4 {
				t.Errorf("FencingToken = %d, want 4 (kept while no one holds the lease)", s.FencingToken)
			}
		})
	}
}

func TestTrackerHolderExpiry(t *testing.T) {
	for _, tc := range []struct {
		name       string
		after      time.Duration
		wantHolder string
	}{
		{name: "just read", after: 0, wantHolder: "pod-b"},
		{name: "just before the lease duration", after: 15*time.Second - time.Nanosecond, wantHolder: "pod-b"},
		{name: "at the lease duration", after: 15 * time.Second, wantHolder: ""},
		{name: "long after", after: time.Hour, wantHolder: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tr.observeRead(other("pod-b", 6, clk.Now()))
			clk.SetTime(t0.Add(tc.after))
			s := tr.Snapshot()
			if s.Holder != tc.wantHolder {
				t.Errorf("Holder = %q, want %q", s.Holder, tc.wantHolder)
			}
			if s.FencingToken != 6 {
				t.Errorf("FencingToken = %d, want 6", s.FencingToken)
			}
			if s.IsLeader {
				t.Error("IsLeader = true for another pod's lease")
			}
		})
	}

	t.Run("unchanged reads do not extend the holder", func(t *testing.T) {
		tr, clk := newTestTracker(t)
		r := other("pod-b", 6, clk.Now())
		tr.observeRead(r)
		clk.Step(10 * time.Second)
		tr.observeRead(r)
		clk.Step(5 * time.Second)
		if got := tr.Snapshot().Holder; got != "" {
			t.Errorf("Holder = %q a lease duration after the record last changed, want \"\"", got)
		}
	})
	t.Run("a renewal by the holder extends it", func(t *testing.T) {
		tr, clk := newTestTracker(t)
		tr.observeRead(other("pod-b", 6, clk.Now()))
		clk.Step(10 * time.Second)
		tr.observeRead(other("pod-b", 6, clk.Now()))
		clk.Step(14 * time.Second)
		if got := tr.Snapshot().Holder; got != "pod-b" {
			t.Errorf("Holder = %q, want pod-b", got)
		}
	})
}

func TestTrackerObserveRead(t *testing.T) {
	for _, tc := range []struct {
		name        string
		read        record
		wantLeader  bool
		wantHolder  string
		wantToken   int64
		wantOwnTerm bool
	}{
		{name: "own term read back", read: own(3, t0), wantLeader: true, wantHolder: testIdentity, wantToken: 3, wantOwnTerm: true},
		{name: "another holder", read: other("pod-b", 4, t0), wantHolder: "pod-b", wantToken: 4, wantOwnTerm: true},
		{name: "own identity with another term", read: own(5, t0), wantHolder: testIdentity, wantToken: 5, wantOwnTerm: true},
		{name: "released by someone", read: record{transitions: 3, durationSeconds: 1, renewTime: t0}, wantHolder: "", wantToken: 3, wantOwnTerm: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tr.observeWrite(clk.Now(), own(3, t0))
			tr.observeRead(tc.read)
			s := tr.Snapshot()
			if s.IsLeader != tc.wantLeader || s.Holder != tc.wantHolder || s.FencingToken != tc.wantToken {
				t.Errorf("isLeader, holder, token = %v, %q, %d; want %v, %q, %d", s.IsLeader, s.Holder, s.FencingToken, tc.wantLeader, tc.wantHolder, tc.wantToken)
			}
			if token, ok := tr.ownTerm(); ok != tc.wantOwnTerm || token != 3 {
				t.Errorf("ownTerm() = %d, %v; want 3, %v", token, ok, tc.wantOwnTerm)
			}
			if tr.claimLapsed() {
				t.Error("claimLapsed() = true right after a write")
			}
		})
	}
}

func TestTrackerPreviousIncarnationIsNotOurs(t *testing.T) {
	tr, clk := newTestTracker(t)
	// Before this process writes, a record naming its identity belongs to
	// an earlier process: not leader, no own term.
	tr.observeRead(own(7, clk.Now()))
	s := tr.Snapshot()
	if s.IsLeader {
		t.Error("IsLeader = true for a previous incarnation's term")
	}
	if s.Holder != testIdentity || s.FencingToken != 7 {
		t.Errorf("holder, token = %q, %d; want %q, 7", s.Holder, s.FencingToken, testIdentity)
	}
	if _, ok := tr.ownTerm(); ok {
		t.Error("ownTerm() reports a term this process never wrote")
	}
	if tr.claimLapsed() {
		t.Error("claimLapsed() = true though this process holds nothing")
	}
}

func TestTrackerSetClaiming(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeWrite(clk.Now(), own(2, clk.Now()))
	before, changed := tr.Watch()
	if !before.IsLeader {
		t.Fatal("not leader after a write")
	}
	tr.setClaiming(false, leadership.ReasonReleased)
	if !isClosed(changed) {
		t.Error("setClaiming(false, leadership.ReasonReleased) did not wake watchers")
	}
	s := tr.Snapshot()
	if s.IsLeader || !s.LeaderSince.IsZero() || !s.ValidUntil.IsZero() {
		t.Errorf("after setClaiming(false, leadership.ReasonReleased): IsLeader = %v, LeaderSince = %v, ValidUntil = %v; want false and zero times", s.IsLeader, s.LeaderSince, s.ValidUntil)
	}
	// A successful write while not claiming does not make this pod leader.
	tr.observeWrite(clk.Now(), own(2, clk.Now()))
	if tr.Snapshot().IsLeader {
		t.Error("IsLeader = true after a write while not claiming")
	}
}

func TestTrackerObserveRelease(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeWrite(clk.Now(), own(9, clk.Now()))
	_, changed := tr.Watch()
	tr.observeRelease(record{transitions: 9, durationSeconds: 1, renewTime: clk.Now()})
	if !isClosed(changed) {
		t.Error("observeRelease did not wake watchers")
	}
	s := tr.Snapshot()
	if s.IsLeader || s.Holder != "" || s.FencingToken != 9 || s.LeaseDurationSeconds != 1 {
		t.Errorf("isLeader, holder, token, duration = %v, %q, %d, %d; want false, \"\", 9, 1", s.IsLeader, s.Holder, s.FencingToken, s.LeaseDurationSeconds)
	}
	if _, ok := tr.ownTerm(); ok {
		t.Error("ownTerm() still set after a release")
	}
	if tr.claimLapsed() {
		t.Error("claimLapsed() = true after a release")
	}
}

func TestTrackerStateFields(t *testing.T) {
	tr, clk := newTestTracker(t)
	base := tr.Snapshot().Revision
	renew := t0.Add(123456 * time.Microsecond)
	start := clk.Now()
	clk.Step(500 * time.Millisecond)
	tr.observeWrite(start, record{holder: testIdentity, transitions: 7, durationSeconds: 15, renewTime: renew})
	s := tr.Snapshot()
	want := leadership.State{
		Namespace:            testNamespace,
		Name:                 testName,
		Identity:             testIdentity,
		Holder:               testIdentity,
		IsLeader:             true,
		FencingToken:         7,
		LeaseDurationSeconds: 15,
		RenewTime:            renew,
		LeaderSince:          t0.Add(500 * time.Millisecond),
		ValidUntil:           t0.Add(testRenewDeadline),
		Deadline:             t0.Add(testRenewDeadline),
		Revision:             base + 1,
		LastChange:           leadership.Change{Leader: true, Reason: leadership.ReasonAcquired, At: t0.Add(500 * time.Millisecond), FencingToken: 7},
	}
	if s != want {
		t.Errorf("Snapshot() =\n%+v\nwant\n%+v", s, want)
	}
	if got := tr.lastRenewTime(); !got.Equal(t0.Add(500 * time.Millisecond)) {
		t.Errorf("lastRenewTime() = %v, want the time the write returned", got)
	}
}

func TestTrackerReachedAPI(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(tr *tracker)
		want bool
	}{
		{name: "nothing yet", do: func(*tracker) {}, want: false},
		{name: "not found", do: (*tracker).observeNotFound, want: true},
		{name: "read", do: func(tr *tracker) { tr.observeRead(other("pod-b", 1, t0)) }, want: true},
		{name: "write", do: func(tr *tracker) { tr.observeWrite(t0, own(1, t0)) }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, _ := newTestTracker(t)
			tc.do(tr)
			if got := tr.ReachedAPI(); got != tc.want {
				t.Errorf("ReachedAPI() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTrackerTermsObserved(t *testing.T) {
	tr, clk := newTestTracker(t)
	steps := []struct {
		name string
		do   func()
		want uint64
	}{
		{name: "nothing observed", do: func() {}, want: 0},
		{name: "first holder", do: func() { tr.observeRead(other("pod-b", 1, t0)) }, want: 1},
		{name: "holder renews", do: func() { tr.observeRead(other("pod-b", 1, t0.Add(time.Second))) }, want: 1},
		{name: "holder released", do: func() { tr.observeRead(record{transitions: 1, durationSeconds: 1}) }, want: 1},
		{name: "new holder", do: func() { tr.observeRead(other("pod-c", 2, t0)) }, want: 2},
		{name: "same holder, new term", do: func() { tr.observeRead(other("pod-c", 3, t0)) }, want: 3},
		{name: "this pod acquires", do: func() { tr.observeWrite(clk.Now(), own(4, t0)) }, want: 4},
		{name: "this pod renews", do: func() { tr.observeWrite(clk.Now(), own(4, t0.Add(time.Second))) }, want: 4},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do()
			if got := tr.termsObserved(); got != step.want {
				t.Errorf("termsObserved() = %d, want %d", got, step.want)
			}
		})
	}
}

func TestMetrics(t *testing.T) {
	tr, clk := newTestTracker(t)
	m := newMetrics(tr)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.collectors...)
	// values gathers every series by metric name (name{label="value"} for
	// a labelled one); for the histogram, its sample count. The counter by
	// reason has a series for every reason from the start.
	values := func(t *testing.T) map[string]float64 {
		t.Helper()
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("Gather: %v", err)
		}
		got := map[string]float64{}
		for _, f := range families {
			if f.GetName() == "leader_elector_transitions_total" && len(f.GetMetric()) != len(leadership.Reasons) {
				t.Fatalf("%s has %d series, want one per reason (%d)", f.GetName(), len(f.GetMetric()), len(leadership.Reasons))
			}
			for _, s := range f.GetMetric() {
				name := f.GetName()
				for _, l := range s.GetLabel() {
					name += fmt.Sprintf("{%s=%q}", l.GetName(), l.GetValue())
				}
				switch {
				case s.GetGauge() != nil:
					got[name] = s.GetGauge().GetValue()
				case s.GetCounter() != nil:
					if s.GetCounter().GetValue() == 0 && len(s.GetLabel()) > 0 {
						continue // the reasons that did not happen
					}
					got[name] = s.GetCounter().GetValue()
				case s.GetHistogram() != nil:
					got[name] = float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
		return got
	}

	if got := values(t)["leader_elector_last_renew_timestamp_seconds"]; got != 0 {
		t.Errorf("last renew timestamp = %v before any write, want 0", got)
	}
	tr.observeRead(other("pod-b", 1, t0))
	start := clk.Now()
	clk.Step(time.Second)
	tr.observeWrite(start, own(2, start))
	m.observeRenewal(time.Second)

	for _, tc := range []struct {
		name string
		at   time.Time
		want map[string]float64
	}{
		{
			name: "while leading",
			at:   start.Add(testRenewDeadline - time.Nanosecond),
			want: map[string]float64{
				"leader_elector_is_leader":                            1,
				"leader_elector_fencing_token":                        2,
				"leader_elector_leader_changes_total":                 2,
				"leader_elector_last_renew_timestamp_seconds":         float64(t0.Add(time.Second).Unix()),
				"leader_elector_renew_duration_seconds":               1,
				`leader_elector_transitions_total{reason="acquired"}`: 1,
			},
		},
		{
			// No timer has run: the scrape itself sees the lapse.
			name: "after the renew deadline",
			at:   start.Add(testRenewDeadline),
			want: map[string]float64{
				"leader_elector_is_leader":                                  0,
				"leader_elector_fencing_token":                              2,
				"leader_elector_leader_changes_total":                       2,
				"leader_elector_last_renew_timestamp_seconds":               float64(t0.Add(time.Second).Unix()),
				"leader_elector_renew_duration_seconds":                     1,
				`leader_elector_transitions_total{reason="acquired"}`:       1,
				`leader_elector_transitions_total{reason="renew-deadline"}`: 1,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.SetTime(tc.at)
			// The counter by reason counts changes as they are published
			// (by the timer in a running process); the registry gathers its
			// collectors concurrently, so publish first.
			tr.Snapshot()
			got := values(t)
			if len(got) != len(tc.want) {
				t.Errorf("gathered %v, want %v", got, tc.want)
			}
			for name, want := range tc.want {
				if got[name] != want {
					t.Errorf("%s = %v, want %v", name, got[name], want)
				}
			}
		})
	}
}

func TestTrackerMayAcquire(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setUp func(tr *tracker, clk asyncClock)
		want  bool
		// wantExpired: another holder has not renewed for its lease
		// duration.
		wantExpired bool
	}{
		{name: "nothing observed", setUp: func(*tracker, asyncClock) {}, want: true},
		{
			name: "released lease",
			setUp: func(tr *tracker, _ asyncClock) {
				tr.observeRead(record{transitions: 4, durationSeconds: 1, renewTime: t0})
			},
			want: true,
		},
		{
			name:  "replaced as spec: {}, just seen",
			setUp: func(tr *tracker, _ asyncClock) { tr.observeRead(record{}) },
			want:  false,
		},
		{
			name: "replaced as spec: {}, a lease duration later",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(record{})
				clk.Step(testLeaseDuration)
			},
			want: true,
		},
		{
			name:  "another holder, just renewed",
			setUp: func(tr *tracker, clk asyncClock) { tr.observeRead(other("pod-b", 4, clk.Now())) },
			want:  false,
		},
		{
			name: "another holder, just before expiry",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(15*time.Second - time.Nanosecond)
			},
			want: false,
		},
		{
			name: "another holder, expired",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(15 * time.Second)
			},
			want:        true,
			wantExpired: true,
		},
		{
			name: "another holder that keeps renewing",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(10 * time.Second)
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(10 * time.Second)
			},
			want: false,
		},
		{
			name:  "a previous incarnation's term",
			setUp: func(tr *tracker, clk asyncClock) { tr.observeRead(own(4, clk.Now())) },
			want:  false,
		},
		{
			name:  "holding",
			setUp: func(tr *tracker, clk asyncClock) { tr.observeWrite(clk.Now(), own(4, clk.Now())) },
			want:  true,
		},
		{
			name: "own term after the round stopped",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeWrite(clk.Now(), own(4, clk.Now()))
				tr.stoppedLeading()
			},
			want: true,
		},
		{
			name: "deleted",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				tr.observeDeleted()
			},
			want: false,
		},
		{
			name: "deleted, a lease duration later",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				tr.observeDeleted()
				clk.Step(testLeaseDuration)
			},
			want: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tc.setUp(tr, clk)
			if got := tr.mayAcquire(); got != tc.want {
				t.Errorf("mayAcquire() = %v, want %v", got, tc.want)
			}
			if got := tr.holderExpired(); got != tc.wantExpired {
				t.Errorf("holderExpired() = %v, want %v", got, tc.wantExpired)
			}
		})
	}
}

func TestTrackerNextAttempt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setUp  func(tr *tracker, clk asyncClock)
		wantAt time.Time
		wantOK bool
	}{
		{name: "nothing observed", setUp: func(*tracker, asyncClock) {}},
		{
			// When it was seen released: already past, so at once, and
			// the same moment on every call (a back-off counts from it).
			name: "released lease: when it was seen released",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(record{transitions: 4, durationSeconds: 1, renewTime: t0})
				clk.Step(time.Second)
			},
			wantAt: t0,
			wantOK: true,
		},
		{
			name: "another holder: when its lease runs out",
			setUp: func(tr *tracker, clk asyncClock) {
				clk.Step(time.Second)
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(time.Second)
			},
			wantAt: t0.Add(16 * time.Second),
			wantOK: true,
		},
		{
			name: "deleted: a lease duration after the deletion was seen",
			setUp: func(tr *tracker, clk asyncClock) {
				tr.observeRead(other("pod-b", 4, clk.Now()))
				clk.Step(time.Second)
				tr.observeDeleted()
			},
			wantAt: t0.Add(time.Second + testLeaseDuration),
			wantOK: true,
		},
		{
			name:  "holding",
			setUp: func(tr *tracker, clk asyncClock) { tr.observeWrite(clk.Now(), own(4, clk.Now())) },
		},
		{
			name: "not claiming",
			setUp: func(tr *tracker, _ asyncClock) {
				tr.observeRead(record{transitions: 4, durationSeconds: 1})
				tr.setClaiming(false, leadership.ReasonReleased)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tc.setUp(tr, clk)
			at, ok := tr.nextAttempt()
			if ok != tc.wantOK || !at.Equal(tc.wantAt) {
				t.Errorf("nextAttempt() = %v, %v; want %v, %v", at, ok, tc.wantAt, tc.wantOK)
			}
		})
	}
}

func TestTrackerObserveDeleted(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeWrite(clk.Now(), own(5, clk.Now()))
	if !tr.holdingLease() {
		t.Error("holdingLease() = false after a write")
	}
	_, changed := tr.Watch()
	tr.observeDeleted()
	if !isClosed(changed) {
		t.Error("observeDeleted did not wake watchers")
	}
	s := tr.Snapshot()
	if s.IsLeader || s.Holder != "" || s.FencingToken != 5 {
		t.Errorf("isLeader, holder, token = %v, %q, %d; want false, \"\", 5 (kept)", s.IsLeader, s.Holder, s.FencingToken)
	}
	if tr.holdingLease() {
		t.Error("holdingLease() = true after the Lease was deleted")
	}
	if token, err := tr.newTermToken(1, true); err != nil || token != 6 {
		t.Errorf("newTermToken(1) = %d, %v; want 6 (above the token seen before the deletion)", token, err)
	}
}

// TestTrackerTimers: exactly one timer is pending while the state will
// change by itself, and reads do not add any.
func TestTrackerTimers(t *testing.T) {
	tr, clk := newTestTracker(t)
	steps := []struct {
		name string
		do   func(t *testing.T)
		want int
	}{
		{name: "nothing known", do: func(*testing.T) { tr.Snapshot() }, want: 0},
		{name: "leading", do: func(*testing.T) { tr.observeWrite(clk.Now(), own(1, clk.Now())) }, want: 1},
		{
			name: "many reads",
			do: func(*testing.T) {
				for range 10 {
					tr.Snapshot()
					tr.Watch()
				}
			},
			want: 1,
		},
		{
			name: "renewal",
			do: func(*testing.T) {
				clk.Step(2 * time.Second)
				tr.observeWrite(clk.Now(), own(1, clk.Now()))
			},
			want: 1,
		},
		{
			name: "claim lapses: the Lease's expiry is next",
			do: func(t *testing.T) {
				_, changed := tr.Watch()
				clk.Step(testRenewDeadline + time.Millisecond)
				waitClosed(t, changed, "end of the claim")
				tr.Snapshot()
			},
			want: 1,
		},
		{
			name: "Lease expires: nothing is next",
			do: func(t *testing.T) {
				_, changed := tr.Watch()
				clk.Step(15 * time.Second)
				waitClosed(t, changed, "expiry")
				tr.Snapshot()
			},
			want: 0,
		},
		{
			name: "another holder",
			do:   func(*testing.T) { tr.observeRead(other("pod-b", 2, clk.Now())) },
			want: 1,
		},
		{name: "stopped", do: func(*testing.T) { tr.stop() }, want: 0},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.do(t)
			if got := clk.Waiters(); got != step.want {
				t.Errorf("%d timers pending, want %d", got, step.want)
			}
		})
	}
}

// TestRevisionsDoNotRepeatAcrossProcesses: a tracker's revisions start at
// the wall clock in microseconds, so that a restarted sidecar does not reuse
// the revisions of the process before it (which started, and changed its
// state, earlier), and a long-poll carrying one of those is answered at
// once.
func TestRevisionsDoNotRepeatAcrossProcesses(t *testing.T) {
	before := time.Now().UnixMicro()
	tr, _ := newTestTracker(t)
	first := tr.Snapshot().Revision
	if first < uint64(before) {
		t.Errorf("first revision %d, want at least the start time in microseconds %d", first, before)
	}
	if first >= 1<<53 {
		t.Errorf("first revision %d is not exact as a JSON number (2^53)", first)
	}
}
