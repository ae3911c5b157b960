package election

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/leadership"
)

// lineRecorder collects the lines a funcr logger writes.
type lineRecorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *lineRecorder) add(prefix, args string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, args)
}

func (r *lineRecorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// waitLines waits until n lines were written and returns them.
func (r *lineRecorder) waitLines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(wait.ForeverTestTimeout)
	for len(r.get()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	got := r.get()
	if len(got) != n {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), n, strings.Join(got, "\n"))
	}
	return got
}

// newTestTransitionLog returns a started log of a tracker's leadership
// changes, without the holders observed (-v=2).
func newTestTransitionLog(t *testing.T) (*tracker, asyncClock, *transitionLog, *lineRecorder) {
	t.Helper()
	tr, clk := newTestTracker(t)
	l := &transitionLog{tracker: tr}
	tr.onChange = l.wake
	rec := &lineRecorder{}
	l.start(funcr.New(rec.add, funcr.Options{}))
	return tr, clk, l, rec
}

func TestTransitionLogLines(t *testing.T) {
	tr, clk := newTestTracker(t)
	l := &transitionLog{tracker: tr}
	tr.onChange = l.wake
	rec := &lineRecorder{}

	// Before start (before Run) nothing is written.
	tr.observeRead(other("pod-b", 1, clk.Now()))
	l.write()
	if got := rec.get(); len(got) != 0 {
		t.Fatalf("lines before start: %q", got)
	}

	l.start(funcr.New(rec.add, funcr.Options{Verbosity: 2}))
	// One change at a time: the holder line shows the holder a write
	// finds, not every holder in between.
	for i, step := range []struct {
		change func()
		want   string
	}{
		{func() { tr.observeRead(other("pod-c", 2, clk.Now())) }, `"msg"="Observed new holder" "holder"="pod-c" "fencingToken"=2`},
		{func() { tr.observeWrite(clk.Now(), own(3, clk.Now())) }, `"msg"="Became leader" "reason"="acquired" "fencingToken"=3`},
		{func() { tr.setClaiming(false, leadership.ReasonReleased) }, `"msg"="Stopped leading" "reason"="released" "fencingToken"=3`},
	} {
		step.change()
		if got := rec.waitLines(t, i+1)[i]; !strings.Contains(got, step.want) {
			t.Errorf("line %d = %s, want it to contain %s", i, got, step.want)
		}
	}

	// stop writes what is pending before it returns: the change that ends
	// a run is logged.
	tr.setClaiming(true, "")
	tr.setClaiming(false, leadership.ReasonShutdown)
	l.stop()
	got := rec.get()
	if len(got) != 5 || !strings.Contains(got[3], `"Became leader"`) || !strings.Contains(got[4], `"Stopped leading" "reason"="shutdown" "fencingToken"=3`) {
		t.Fatalf("after stop, lines = \n%s\nwant the resumed term and its end by shutdown last", strings.Join(got, "\n"))
	}

	// After stop nothing more is written.
	tr.setClaiming(true, "")
	l.write()
	if got := rec.get(); len(got) != 5 {
		t.Errorf("lines after stop: %q", got[5:])
	}
}

// TestTransitionLogOrder changes leadership many times, each change waking
// a writer: every change the tracker records is written once, in order.
func TestTransitionLogOrder(t *testing.T) {
	tr, clk, l, rec := newTestTransitionLog(t)
	var recorded []leadership.Change
	tr.mu.Lock()
	tr.onTransition = func(c leadership.Change) { recorded = append(recorded, c) }
	tr.mu.Unlock()
	count := func() int {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return len(recorded)
	}
	// Fewer changes than maxPendingChanges: none may be dropped.
	for token := int64(1); count() < maxPendingChanges-4; token++ {
		tr.setClaiming(true, "")
		tr.observeWrite(clk.Now(), own(token, clk.Now()))
		tr.setClaiming(false, leadership.ReasonReleased)
	}
	l.stop()
	got := rec.get()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(got) != len(recorded) {
		t.Fatalf("%d lines for %d changes:\n%s", len(got), len(recorded), strings.Join(got, "\n"))
	}
	for i, c := range recorded {
		want := fmt.Sprintf(`"msg"="Became leader" "reason"="%s" "fencingToken"=%d`, c.Reason, c.FencingToken)
		if !c.Leader {
			want = fmt.Sprintf(`"msg"="Stopped leading" "reason"="%s" "fencingToken"=%d`, c.Reason, c.FencingToken)
		}
		if !strings.Contains(got[i], want) {
			t.Fatalf("line %d = %s, want it to contain %s", i, got[i], want)
		}
	}
}
