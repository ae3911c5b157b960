package election

import (
	"slices"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
)

// Every way a term ends is recorded with its reason, in the State's
// LastChange and in the changes the log line writer takes; a term that
// begins is "acquired".
func TestTrackerRecordsTheReasonOfEachChange(t *testing.T) {
	deadline := t0.Add(testRenewDeadline)
	cases := []struct {
		name string
		stop func(tr *tracker, clk asyncClock)
		want leadership.Reason
		// wantAt is when the term ended; zero means the moment of stop.
		wantAt time.Time
	}{
		{name: "POST /release", want: leadership.ReasonReleased, stop: func(tr *tracker, _ asyncClock) { tr.setClaiming(false, leadership.ReasonReleased) }},
		{name: "SIGTERM", want: leadership.ReasonShutdown, stop: func(tr *tracker, _ asyncClock) { tr.setClaiming(false, leadership.ReasonShutdown) }},
		{name: "another holder observed", want: leadership.ReasonTakenOver, stop: func(tr *tracker, clk asyncClock) {
			tr.observeRead(other("pod-b", 4, clk.Now()))
		}},
		{name: "our term replaced by another of ours", want: leadership.ReasonTakenOver, stop: func(tr *tracker, clk asyncClock) {
			tr.observeRead(own(4, clk.Now()))
		}},
		{name: "Lease deleted", want: leadership.ReasonLeaseDeleted, stop: func(tr *tracker, _ asyncClock) { tr.observeDeleted() }},
		{name: "Lease not found", want: leadership.ReasonLeaseDeleted, stop: func(tr *tracker, _ asyncClock) { tr.observeNotFound() }},
		{name: "renew deadline passes", want: leadership.ReasonRenewDeadline, wantAt: deadline, stop: func(_ *tracker, clk asyncClock) {
			// Paused well past the deadline: the change is dated at it.
			clk.Step(testRenewDeadline + 5*time.Second)
		}},
		{name: "taken over after the deadline passed", want: leadership.ReasonRenewDeadline, wantAt: deadline, stop: func(tr *tracker, clk asyncClock) {
			clk.Step(testRenewDeadline + 5*time.Second)
			tr.observeRead(other("pod-b", 4, clk.Now()))
		}},
		{name: "client-go gives up", want: leadership.ReasonRenewDeadline, stop: func(tr *tracker, clk asyncClock) {
			clk.Step(time.Second)
			if got := tr.stoppedLeading(); got != leadership.ReasonRenewDeadline {
				t.Errorf("stoppedLeading() = %q, want %q", got, leadership.ReasonRenewDeadline)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tr.observeWrite(clk.Now(), own(3, clk.Now()))
			if s := tr.Snapshot(); s.LastChange != (leadership.Change{Leader: true, Reason: leadership.ReasonAcquired, At: t0, FencingToken: 3}) {
				t.Fatalf("after acquiring, LastChange = %+v", s.LastChange)
			}
			tc.stop(tr, clk)
			wantAt := tc.wantAt
			if wantAt.IsZero() {
				wantAt = clk.Now()
			}
			want := leadership.Change{Reason: tc.want, At: wantAt, FencingToken: 3}
			s := tr.Snapshot()
			if s.IsLeader || s.LastChange != want {
				t.Errorf("IsLeader = %v, LastChange = %+v; want false, %+v", s.IsLeader, s.LastChange, want)
			}
			// client-go's "stopped leading" Event, recorded afterwards,
			// carries the same reason.
			if got := tr.stoppedLeading(); got != tc.want {
				t.Errorf("stoppedLeading() = %q, want %q", got, tc.want)
			}
			reasons := []leadership.Reason{}
			for _, c := range tr.takeChanges() {
				reasons = append(reasons, c.Reason)
			}
			if wantReasons := []leadership.Reason{leadership.ReasonAcquired, tc.want}; !slices.Equal(reasons, wantReasons) {
				t.Errorf("changes taken = %v, want %v (one per change)", reasons, wantReasons)
			}
			if more := tr.takeChanges(); len(more) != 0 {
				t.Errorf("changes taken twice: %v", more)
			}
		})
	}
}

// A term that is acquired and lost between two reads of the log writer is
// still two lines, in order.
func TestTrackerKeepsEveryChangeForTheLog(t *testing.T) {
	tr, clk := newTestTracker(t)
	tr.observeWrite(clk.Now(), own(3, clk.Now()))
	tr.setClaiming(false, leadership.ReasonReleased)
	tr.observeRelease(record{transitions: 3, durationSeconds: 1, renewTime: clk.Now()})
	tr.setClaiming(true, "")
	clk.Step(time.Second)
	tr.observeWrite(clk.Now(), own(4, clk.Now()))
	tr.observeRead(other("pod-b", 5, clk.Now()))
	var got []leadership.Change
	for _, c := range tr.takeChanges() {
		got = append(got, leadership.Change{Leader: c.Leader, Reason: c.Reason, FencingToken: c.FencingToken})
	}
	want := []leadership.Change{
		{Leader: true, Reason: leadership.ReasonAcquired, FencingToken: 3},
		{Reason: leadership.ReasonReleased, FencingToken: 3},
		{Leader: true, Reason: leadership.ReasonAcquired, FencingToken: 4},
		{Reason: leadership.ReasonTakenOver, FencingToken: 4},
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %+v\nwant %+v", got, want)
	}
}
