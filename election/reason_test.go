package election

import (
	"slices"
	"testing"
	"time"
)

// Every way a term ends is recorded with its reason, in the State's
// LastChange and in the changes the log line writer takes; a term that
// begins is "acquired".
func TestTrackerRecordsTheReasonOfEachChange(t *testing.T) {
	deadline := t0.Add(testRenewDeadline)
	cases := []struct {
		name string
		stop func(tr *tracker, clk asyncClock)
		want Reason
		// wantAt is when the term ended; zero means the moment of stop.
		wantAt time.Time
	}{
		{name: "POST /release", want: ReasonReleased, stop: func(tr *tracker, _ asyncClock) { tr.setClaiming(false, ReasonReleased) }},
		{name: "SIGTERM", want: ReasonShutdown, stop: func(tr *tracker, _ asyncClock) { tr.setClaiming(false, ReasonShutdown) }},
		{name: "another holder observed", want: ReasonTakenOver, stop: func(tr *tracker, clk asyncClock) {
			tr.observeRead(other("pod-b", 4, clk.Now()))
		}},
		{name: "our term replaced by another of ours", want: ReasonTakenOver, stop: func(tr *tracker, clk asyncClock) {
			tr.observeRead(own(4, clk.Now()))
		}},
		{name: "Lease deleted", want: ReasonLeaseDeleted, stop: func(tr *tracker, _ asyncClock) { tr.observeDeleted() }},
		{name: "Lease not found", want: ReasonLeaseDeleted, stop: func(tr *tracker, _ asyncClock) { tr.observeNotFound() }},
		{name: "renew deadline passes", want: ReasonRenewDeadline, wantAt: deadline, stop: func(_ *tracker, clk asyncClock) {
			// Paused well past the deadline: the change is dated at it.
			clk.Step(testRenewDeadline + 5*time.Second)
		}},
		{name: "taken over after the deadline passed", want: ReasonRenewDeadline, wantAt: deadline, stop: func(tr *tracker, clk asyncClock) {
			clk.Step(testRenewDeadline + 5*time.Second)
			tr.observeRead(other("pod-b", 4, clk.Now()))
		}},
		{name: "client-go gives up", want: ReasonRenewDeadline, stop: func(tr *tracker, clk asyncClock) {
			clk.Step(time.Second)
			if got := tr.stoppedLeading(); got != ReasonRenewDeadline {
				t.Errorf("stoppedLeading() = %q, want %q", got, ReasonRenewDeadline)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newTestTracker(t)
			tr.observeWrite(clk.Now(), own(3, clk.Now()))
			if s := tr.Snapshot(); s.LastChange != (Change{Leader: true, Reason: ReasonAcquired, At: t0, FencingToken: 3}) {
				t.Fatalf("after acquiring, LastChange = %+v", s.LastChange)
			}
			tc.stop(tr, clk)
			wantAt := tc.wantAt
			if wantAt.IsZero() {
				wantAt = clk.Now()
			}
			want := Change{Reason: tc.want, At: wantAt, FencingToken: 3}
			s := tr.Snapshot()
			if s.IsLeader || s.LastChange != want {
				t.Errorf("IsLeader = %v, LastChange = %+v; want false, %+v", s.IsLeader, s.LastChange, want)
			}
			// client-go's "stopped leading" Event, recorded afterwards,
			// carries the same reason.
			if got := tr.stoppedLeading(); got != tc.want {
				t.Errorf("stoppedLeading() = %q, want %q", got, tc.want)
			}
			reasons := []Reason{}
			for _, c := range tr.takeChanges() {
				reasons = append(reasons, c.Reason)
			}
			if wantReasons := []Reason{ReasonAcquired, tc.want}; !slices.Equal(reasons, wantReasons) {
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
	tr.setClaiming(false, ReasonReleased)
	tr.observeRelease(record{transitions: 3, durationSeconds: 1, renewTime: clk.Now()})
	tr.setClaiming(true, "")
	clk.Step(time.Second)
	tr.observeWrite(clk.Now(), own(4, clk.Now()))
	tr.observeRead(other("pod-b", 5, clk.Now()))
	var got []Change
	for _, c := range tr.takeChanges() {
		got = append(got, Change{Leader: c.Leader, Reason: c.Reason, FencingToken: c.FencingToken})
	}
	want := []Change{
		{Leader: true, Reason: ReasonAcquired, FencingToken: 3},
		{Reason: ReasonReleased, FencingToken: 3},
		{Leader: true, Reason: ReasonAcquired, FencingToken: 4},
		{Reason: ReasonTakenOver, FencingToken: 4},
	}
	if !slices.Equal(got, want) {
		t.Errorf("changes = %+v\nwant %+v", got, want)
	}
}
