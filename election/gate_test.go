package election

import (
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// fakeGate admits while open, and counts admissions on their way.
type fakeGate struct {
	open     bool
	admitted int
	inflight int
}

func (g *fakeGate) Admits() bool { return g.open }

func (g *fakeGate) Admit() (func(), bool) {
	if !g.open {
		return nil, false
	}
	g.admitted++
	g.inflight++
	return func() { g.inflight-- }, true
}

// TestLockGate: a gate that does not admit hides a free, expired or missing
// Lease from client-go (shown as held, renewed just now) and refuses the
// acquisition itself; renewals of this process's own term are never asked.
func TestLockGate(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lease is what the API server holds (nil: no Lease); after is how
		// long after the first read the checked Get and write happen.
		lease      runtime.Object
		after      time.Duration
		open       bool
		wantShown  string
		wantErr    error
		wantWrites int
	}{
		{name: "released, closed", lease: newLease("", 7, t0), open: false, wantShown: notAdmittedHolder, wantErr: errNotAdmitted},
		{name: "released, open", lease: newLease("", 7, t0), open: true, wantShown: "", wantWrites: 1},
		{name: "expired, closed", lease: newLease("pod-b", 7, t0), after: 15 * time.Second, open: false, wantShown: notAdmittedHolder, wantErr: errNotAdmitted},
		{name: "expired, open", lease: newLease("pod-b", 7, t0), after: 15 * time.Second, open: true, wantShown: "", wantWrites: 1},
		{name: "held by another pod: shown as it is", lease: newLease("pod-b", 7, t0), open: false, wantShown: "pod-b", wantErr: errNotExpired},
		{name: "missing, closed", open: false, wantShown: notAdmittedHolder, wantErr: errNotAdmitted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			l := newTestLock(t, []string{"get", "create", "update"}, objs...)
			gate := &fakeGate{open: tc.open}
			l.gate = gate
			if tc.lease != nil {
				getOrFail(t, ctx, l)
			}
			l.clock.Step(tc.after)
			rec, _, err := l.Get(ctx)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if rec.HolderIdentity != tc.wantShown {
				t.Errorf("shown holder %q, want %q", rec.HolderIdentity, tc.wantShown)
			}
			if rec.HolderIdentity == notAdmittedHolder && !rec.RenewTime.Time.Equal(l.clock.Now()) {
				t.Errorf("shown renew time %v, want now (%v), so that client-go never sees it expire", rec.RenewTime, l.clock.Now())
			}
			write := l.Update
			if tc.lease == nil {
				write = l.Create
			}
			err = write(ctx, ownRecord(8, l.clock.Now()))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("write error = %v, want %v", err, tc.wantErr)
			}
			if gate.admitted != tc.wantWrites || gate.inflight != 0 {
				t.Errorf("admitted %d (in flight %d), want %d (0)", gate.admitted, gate.inflight, tc.wantWrites)
			}
			if tc.wantWrites == 1 {
				// A renewal of the term just started is not asked.
				gate.open = false
				l.clock.Step(time.Second)
				if err := l.Update(ctx, ownRecord(8, l.clock.Now())); err != nil {
					t.Fatalf("renewal with the gate closed: %v", err)
				}
				if holder := ptr.Deref(getLease(t, l.client).Spec.HolderIdentity, ""); holder != testIdentity {
					t.Errorf("Lease holder %q after the renewal, want %q", holder, testIdentity)
				}
			}
		})
	}
}
