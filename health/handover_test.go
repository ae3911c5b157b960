package health

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// TestHandoverDue: a healthy leader of an older revision hands over once
// a ready candidate of the newest revision has been seen for
// HandoverAfter, not before; never with the flag off, when it is of the
// newest revision itself, when the newer candidate is not ready, or when
// it does not lead.
func TestHandoverDue(t *testing.T) {
	const after = 10 * time.Second
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	newHealth := func(revision string, handoverAfter time.Duration) *Health {
		h := &Health{cfg: Config{Revision: revision, HandoverAfter: handoverAfter}, clock: clk,
			registry: newRegistry("ns", "app-candidates", "a", time.Minute, nil, nil, clk, nil)}
		h.registry.revision = revision
		h.healthy.Store(true)
		return h
	}
	// a (old) and b (new) as seen at the first read, then b seen to change.
	observe := func(h *Health, bReady bool) {
		ok := "false"
		if bReady {
			ok = "true"
		}
		h.registry.observe(candidatesLease(`{"a":{"healthy":true,"ok":true,"seq":1,"revision":"old","revisionOrder":1},"b":{"healthy":true,"ok":` + ok + `,"seq":1,"revision":"new","revisionOrder":2}}`))
		h.registry.observe(candidatesLease(`{"a":{"healthy":true,"ok":true,"seq":1,"revision":"old","revisionOrder":1},"b":{"healthy":true,"ok":` + ok + `,"seq":2,"revision":"new","revisionOrder":2}}`))
	}

	h := newHealth("old", after)
	observe(h, true)
	if h.handoverDue(true) {
		t.Fatal("handover due at once, want after HandoverAfter")
	}
	clk.Step(after - time.Millisecond)
	if h.handoverDue(true) {
		t.Fatal("handover due before HandoverAfter")
	}
	clk.Step(time.Millisecond)
	if !h.handoverDue(true) {
		t.Fatal("handover not due after HandoverAfter with a ready candidate of the newest revision")
	}
	if h.handoverDue(false) {
		t.Error("handover due while not leading")
	}
	if h.handoverDue(true) {
		t.Error("handover due at once after the wait was reset (not leading in between)")
	}

	for name, h := range map[string]*Health{"flag off": newHealth("old", 0), "newest itself": newHealth("new", after)} {
		observe(h, true)
		first := h.handoverDue(true)
		clk.Step(2 * after)
		if first || h.handoverDue(true) {
			t.Errorf("%s: handover due", name)
		}
	}
	notReady := newHealth("old", after)
	observe(notReady, false)
	notReady.handoverDue(true)
	clk.Step(2 * after)
	if notReady.handoverDue(true) {
		t.Error("handover due with the newer candidate's last probe failed")
	}
}
