package election

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/leadership"
)

// TestAnnotateKeptByRenewals: a fenced annotation is written by the term's
// holder, and the renewals after it build on the written Lease: none fails
// on a conflict, and none drops the annotation.
func TestAnnotateKeptByRenewals(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	// Reactors are added before the elector runs: the fake's list of them
	// is not safe to change while it is used.
	var counting atomic.Bool
	var conflicts atomic.Int32
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if counting.Load() && lease.ResourceVersion != getLease(t, client).ResourceVersion {
			conflicts.Add(1)
		}
		return false, nil, nil
	})

	// One term throughout: a renewal stalled past fastConfig's 1 s renew
	// deadline (the race detector on a loaded machine) ends the claim, and
	// the Lease taken back is a new term. The renewals still run every
	// retry period.
	cfg := fastConfig(client)
	cfg.LeaseDuration, cfg.RenewDeadline = 4*time.Second, 3*time.Second
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	token := e.Snapshot().FencingToken
	counting.Store(true)
	for i := range 10 {
		if err := e.Annotate(ctx, token, "example.com/checkpoint", strconv.Itoa(i)); err != nil {
			t.Fatalf("Annotate %d: %v", i, err)
		}
		if got := getLease(t, client).Annotations["example.com/checkpoint"]; got != strconv.Itoa(i) {
			t.Fatalf("annotation after write %d = %q", i, got)
		}
		if v, ok := e.Annotation("example.com/checkpoint"); !ok || v != strconv.Itoa(i) {
			t.Errorf("Annotation after write %d = %q, %v", i, v, ok)
		}
		// Let a renewal or two run on top of it.
		renewed := getLease(t, client).Spec.RenewTime
		waitFor(t, ctx, "a renewal", func() bool {
			return getLease(t, client).Spec.RenewTime.After(renewed.Time)
		})
		if got := getLease(t, client).Annotations["example.com/checkpoint"]; got != strconv.Itoa(i) {
			t.Fatalf("annotation after a renewal = %q, want %q: the renewal dropped it", got, strconv.Itoa(i))
		}
	}
	if n := conflicts.Load(); n != 0 {
		t.Errorf("%d updates of the Lease failed on a conflict while annotating: the renewals were not built on the annotated Lease", n)
	}
	if !e.Snapshot().IsLeader || e.Snapshot().FencingToken != token {
		t.Errorf("lost the term while annotating: %+v", e.Snapshot())
	}

	if err := e.Annotate(ctx, token+1, "example.com/checkpoint", "x"); !errors.Is(err, leadership.ErrTermChanged) {
		t.Errorf("Annotate with another token: %v, want leadership.ErrTermChanged", err)
	}
	if _, err := e.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Annotate(ctx, token, "example.com/checkpoint", "x"); !errors.Is(err, leadership.ErrNotLeader) {
		t.Errorf("Annotate after release: %v, want leadership.ErrNotLeader", err)
	}
	if got := getLease(t, client).Annotations["example.com/checkpoint"]; got != "9" {
		t.Errorf("annotation after release = %q, want the last one written, 9", got)
	}
}
