package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/internal/leasetest"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leasecache"
	"github.com/leader-elector/leader-elector/leasetimings"
)

var (
	leasesResource = leasetest.Resource
	leasesGVR      = leasetest.GVR
)

// newLease returns the test Lease naming holder.
func newLease(holder string, transitions int32, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testName, ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &metav1.MicroTime{Time: renew},
			RenewTime:            &metav1.MicroTime{Time: renew},
			LeaseTransitions:     ptr.To(transitions),
		},
	}
}

// newFakeClient returns the fake API server (leasetest) holding objs, which
// allows the given verbs on Leases and GET /version, and fails the test on
// any other call.
func newFakeClient(t *testing.T, verbs []string, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	return leasetest.NewClient(t, leasetest.Config{Verbs: verbs, ServerVersion: true}, objs...)
}

// getLease reads the Lease as the API server holds it.
func getLease(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	obj, err := client.Tracker().Get(leasesGVR, testNamespace, testName)
	if err != nil {
		t.Fatalf("get lease: %v", err)
	}
	return obj.(*coordinationv1.Lease)
}

// countActions counts the client's calls with the given verb.
func countActions(c *fake.Clientset, verb string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb {
			n++
		}
	}
	return n
}

type testLock struct {
	*observingLock
	client  *fake.Clientset
	tracker *tracker
	clock   asyncClock
	lapses  int
}

func newTestLock(t *testing.T, verbs []string, objs ...runtime.Object) *testLock {
	t.Helper()
	clk := newTestClock()
	tr := newTracker(clk, testNamespace, testName, testIdentity, testRenewDeadline, testLeaseDuration)
	t.Cleanup(tr.stop)
	client := newFakeClient(t, verbs, objs...)
	tl := &testLock{client: client, tracker: tr, clock: clk}
	tl.observingLock = &observingLock{
		inner: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: testNamespace, Name: testName},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: testIdentity},
		},
		tracker: tr,
		metrics: newMetrics(tr),
		onLapse: func() { tl.lapses++ },
		writing: &sync.Mutex{},
		// A missing Lease is created held, as before the holder-less
		// create (see TestLockCreatesMissingLeaseWithoutHolder).
		ownLease: true,
	}
	return tl
}

// ownRecord is what client-go writes to claim or renew the Lease.
func ownRecord(transitions int, now time.Time) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       testIdentity,
		LeaseDurationSeconds: 15,
		AcquireTime:          metav1.NewTime(now),
		RenewTime:            metav1.NewTime(now),
		LeaderTransitions:    transitions,
	}
}

func TestLockGetShowsRecord(t *testing.T) {
	const disguised = testIdentity + previousIncarnationSuffix
	for _, tc := range []struct {
		name string
		// holder is who the Lease names.
		holder string
		// before runs before the Get that is checked.
		before func(t *testing.T, ctx context.Context, l *testLock)
		// wantShown is the holder client-go must see; wantTracked the
		// holder the tracker, and so the API, reports.
		wantShown, wantTracked string
		wantLeader             bool
	}{
		{name: "another holder", holder: "pod-b", wantShown: "pod-b", wantTracked: "pod-b"},
		{name: "released lease", holder: "", wantShown: "", wantTracked: ""},
		{
			name: "another holder just before expiry",
			// Renewed at the fake clock's start; read now and a little
			// before a lease duration later.
			holder: "pod-b",
			before: func(t *testing.T, ctx context.Context, l *testLock) {
				getOrFail(t, ctx, l)
				l.clock.Step(15*time.Second - time.Nanosecond)
			},
			wantShown:   "pod-b",
			wantTracked: "pod-b",
		},
		{
			// client-go would measure the expiry again from its own first
			// read; the lock shows the Lease as free the moment this pod has
			// seen it unchanged for a lease duration.
			name:   "another holder after a lease duration without change",
			holder: "pod-b",
			before: func(t *testing.T, ctx context.Context, l *testLock) {
				getOrFail(t, ctx, l)
				l.clock.Step(15 * time.Second)
			},
			wantShown:   "",
			wantTracked: "",
		},
		{name: "own identity before our first write", holder: testIdentity, wantShown: disguised, wantTracked: testIdentity},
		{
			name:   "own identity before our first write, expired",
			holder: testIdentity,
			before: func(t *testing.T, ctx context.Context, l *testLock) {
				getOrFail(t, ctx, l)
				l.clock.Step(15 * time.Second)
			},
			wantShown:   "",
			wantTracked: "",
		},
		{
			name:   "own identity after our first write",
			holder: testIdentity,
			before: func(t *testing.T, ctx context.Context, l *testLock) {
				// The previous incarnation's term expires; this process
				// starts its own.
				getOrFail(t, ctx, l)
				l.clock.Step(15 * time.Second)
				if err := l.Update(ctx, ownRecord(8, l.clock.Now())); err != nil {
					t.Fatalf("Update: %v", err)
				}
			},
			wantShown:   testIdentity,
			wantTracked: testIdentity,
			wantLeader:  true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get", "update"}, newLease(tc.holder, 7, t0))
			if tc.before != nil {
				tc.before(t, ctx, l)
			}

			rec, raw, err := l.Get(ctx)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if rec.HolderIdentity != tc.wantShown {
				t.Errorf("record holder = %q, want %q", rec.HolderIdentity, tc.wantShown)
			}
			// client-go compares the raw record to notice changes and keeps
			// the decoded one: they must agree.
			var decoded resourcelock.LeaderElectionRecord
			if err := json.Unmarshal(raw, &decoded); err != nil {
				t.Fatalf("raw record: %v", err)
			}
			if decoded.HolderIdentity != tc.wantShown {
				t.Errorf("raw record holder = %q, want %q", decoded.HolderIdentity, tc.wantShown)
			}
			s := l.tracker.Snapshot()
			if s.Holder != tc.wantTracked {
				t.Errorf("tracked holder = %q, want %q", s.Holder, tc.wantTracked)
			}
			if s.IsLeader != tc.wantLeader {
				t.Errorf("IsLeader = %v, want %v", s.IsLeader, tc.wantLeader)
			}
			// The same read gives the same raw record, so client-go does
			// not take an unchanged Lease for a renewal.
			_, raw2, err := l.Get(ctx)
			if err != nil {
				t.Fatalf("second Get: %v", err)
			}
			if string(raw2) != string(raw) {
				t.Errorf("raw record changed between two reads of the same Lease:\n%s\n%s", raw, raw2)
			}
		})
	}
}

func getOrFail(t *testing.T, ctx context.Context, l *testLock) {
	t.Helper()
	if _, _, err := l.Get(ctx); err != nil {
		t.Fatalf("Get: %v", err)
	}
}

// TestLockUpdateWaitsForExpiry: no acquisition is sent before this pod has
// seen the holder's Lease unchanged for a whole lease duration, whatever
// client-go decided from its one-second-precision comparison.
func TestLockUpdateWaitsForExpiry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		holder  string
		after   time.Duration
		wantErr error
	}{
		{name: "held by another pod", holder: "pod-b", after: 15*time.Second - time.Nanosecond, wantErr: errNotExpired},
		{name: "expired", holder: "pod-b", after: 15 * time.Second},
		{name: "previous incarnation's term", holder: testIdentity, after: time.Second, wantErr: errNotExpired},
		{name: "previous incarnation's term, expired", holder: testIdentity, after: 15 * time.Second},
		{name: "released", holder: "", after: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			verbs := []string{"get"}
			if tc.wantErr == nil {
				verbs = append(verbs, "update")
			}
			l := newTestLock(t, verbs, newLease(tc.holder, 7, t0))
			getOrFail(t, ctx, l)
			l.clock.Step(tc.after)
			err := l.Update(ctx, ownRecord(8, l.clock.Now()))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Update error = %v, want %v", err, tc.wantErr)
			}
			lease := getLease(t, l.client)
			wantHolder := tc.holder
			if tc.wantErr == nil {
				wantHolder = testIdentity
			}
			if got := ptr.Deref(lease.Spec.HolderIdentity, ""); got != wantHolder {
				t.Errorf("Lease holder = %q, want %q", got, wantHolder)
			}
			if s := l.tracker.Snapshot(); s.IsLeader != (tc.wantErr == nil) {
				t.Errorf("IsLeader = %v, want %v", s.IsLeader, tc.wantErr == nil)
			}
		})
	}
}

func TestLockFailedWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", 7, t0))
	l.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(leasesResource, testName, errors.New("changed"))
	})
	getOrFail(t, ctx, l)
	err := l.Update(ctx, ownRecord(8, l.clock.Now()))
	if !apierrors.IsConflict(err) {
		t.Fatalf("Update error = %v, want the conflict", err)
	}
	// A takeover beaten by another write is a race lost, logged as such.
	if !errors.Is(err, errLostRace) {
		t.Errorf("Update error = %v, want it marked as a race lost", err)
	}
	if l.wroteOnce {
		t.Error("wroteOnce set by a failed write: a previous incarnation's term would no longer be recognised")
	}
	if s := l.tracker.Snapshot(); s.IsLeader || s.Holder != "" || s.FencingToken != 7 {
		t.Errorf("isLeader, holder, token = %v, %q, %d after a failed write; want false, \"\", 7", s.IsLeader, s.Holder, s.FencingToken)
	}
	if _, ok := l.tracker.ownTerm(); ok {
		t.Error("ownTerm() set by a failed write")
	}
}

// TestLockRenewalConflictIsNotARaceLost: a conflict on a renewal of this
// pod's own term means something else wrote the Lease while this pod held
// it; it stays an error line, unlike a takeover's.
func TestLockRenewalConflictIsNotARaceLost(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", 7, t0))
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(8, l.clock.Now())); err != nil {
		t.Fatalf("taking the Lease: %v", err)
	}
	l.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(leasesResource, testName, errors.New("changed"))
	})
	l.clock.Step(time.Second)
	err := l.Update(ctx, ownRecord(8, l.clock.Now()))
	if !apierrors.IsConflict(err) {
		t.Fatalf("renewal error = %v, want the conflict", err)
	}
	if errors.Is(err, errLostRace) {
		t.Errorf("renewal error = %v marked as a race lost", err)
	}
}

// TestLockCreateRaceLost: two candidates create a missing Lease at once;
// the one answered AlreadyExists lost a race, with or without the right to
// create the Lease with itself as holder.
func TestLockCreateRaceLost(t *testing.T) {
	for _, ownLease := range []bool{true, false} {
		t.Run(fmt.Sprintf("ownLease=%v", ownLease), func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get", "create"})
			l.ownLease = ownLease
			l.client.PrependReactor("create", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewAlreadyExists(leasesResource, testName)
			})
			if _, _, err := l.Get(ctx); !apierrors.IsNotFound(err) {
				t.Fatalf("Get error = %v, want NotFound", err)
			}
			err := l.Create(ctx, ownRecord(1, l.clock.Now()))
			if !apierrors.IsAlreadyExists(err) || !errors.Is(err, errLostRace) {
				t.Errorf("Create error = %v, want AlreadyExists marked as a race lost", err)
			}
		})
	}
}

// TestLockCreateContinuesToken: a Lease that was deleted is created again
// with a fencing token above the last one this pod saw, never from 0.
func TestLockCreateContinuesToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		// seen is the token this pod observed before the Lease went away;
		// -1 for none.
		seen      int64
		create    int
		wantToken int32
	}{
		{name: "never seen", seen: -1, create: 0, wantToken: 1},
		{name: "seen before deletion", seen: 5, create: 0, wantToken: 6},
		{name: "client-go already above", seen: 5, create: 9, wantToken: 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get", "create"})
			if tc.seen >= 0 {
				l.tracker.observeRead(other("pod-b", tc.seen, t0))
				l.tracker.observeDeleted()
			}
			if _, _, err := l.Get(ctx); !apierrors.IsNotFound(err) {
				t.Fatalf("Get error = %v, want NotFound", err)
			}
			if err := l.Create(ctx, ownRecord(tc.create, l.clock.Now())); err != nil {
				t.Fatalf("Create: %v", err)
			}
			if got := ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, -1); got != tc.wantToken {
				t.Errorf("created Lease transitions = %d, want %d", got, tc.wantToken)
			}
			if s := l.tracker.Snapshot(); !s.IsLeader || s.FencingToken != int64(tc.wantToken) {
				t.Errorf("isLeader, token = %v, %d; want true, %d", s.IsLeader, s.FencingToken, tc.wantToken)
			}
		})
	}
}

func TestLockWriteUpdatesTracker(t *testing.T) {
	const writeTook = 3 * time.Second
	for _, tc := range []struct {
		name  string
		verbs []string
		objs  []runtime.Object
		write func(ctx context.Context, l *testLock, r resourcelock.LeaderElectionRecord) error
	}{
		{
			name:  "create",
			verbs: []string{"get", "create"},
			write: func(ctx context.Context, l *testLock, r resourcelock.LeaderElectionRecord) error {
				return l.Create(ctx, r)
			},
		},
		{
			name:  "update",
			verbs: []string{"get", "update"},
			objs:  []runtime.Object{newLease("", 4, t0)},
			write: func(ctx context.Context, l *testLock, r resourcelock.LeaderElectionRecord) error {
				return l.Update(ctx, r)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, tc.verbs, tc.objs...)
			// A slow API server: the write takes writeTook.
			l.client.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
				if action.GetVerb() != "get" {
					l.clock.Step(writeTook)
				}
				return false, nil, nil
			})
			// client-go reads before it writes.
			_, _, err := l.Get(ctx)
			if tc.objs == nil && !apierrors.IsNotFound(err) {
				t.Fatalf("Get error = %v, want NotFound", err)
			}
			start := l.clock.Now()
			if err := tc.write(ctx, l, ownRecord(5, start)); err != nil {
				t.Fatalf("write: %v", err)
			}

			s := l.tracker.Snapshot()
			if !s.IsLeader || s.Holder != testIdentity || s.FencingToken != 5 {
				t.Errorf("isLeader, holder, token = %v, %q, %d; want true, %q, 5", s.IsLeader, s.Holder, s.FencingToken, testIdentity)
			}
			if want := start.Add(testRenewDeadline); !s.ValidUntil.Equal(want) {
				t.Errorf("ValidUntil = %v, want %v: the claim counts from before the request", s.ValidUntil, want)
			}
			if want := start.Add(writeTook); !s.LeaderSince.Equal(want) {
				t.Errorf("LeaderSince = %v, want %v", s.LeaderSince, want)
			}
			if token, ok := l.tracker.ownTerm(); !ok || token != 5 {
				t.Errorf("ownTerm() = %d, %v; want 5, true", token, ok)
			}
			if !l.wroteOnce {
				t.Error("wroteOnce not set after a successful write")
			}
			if got := ptr.Deref(getLease(t, l.client).Spec.HolderIdentity, ""); got != testIdentity {
				t.Errorf("Lease holder = %q, want %q", got, testIdentity)
			}
			// The claim ends renewDeadline after the start of the request,
			// not after its end.
			l.clock.SetTime(start.Add(testRenewDeadline))
			if l.tracker.Snapshot().IsLeader {
				t.Error("IsLeader = true at renewal start + renew deadline")
			}
		})
	}
}

func TestLockRefusesLapsedRenewal(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setUp runs after this pod's first successful write at t0.
		setUp      func(l *testLock)
		record     func(l *testLock) resourcelock.LeaderElectionRecord
		wantLapsed bool
	}{
		{
			name:   "renewal within the deadline",
			setUp:  func(l *testLock) { l.clock.Step(testRenewDeadline - time.Millisecond) },
			record: func(l *testLock) resourcelock.LeaderElectionRecord { return ownRecord(1, l.clock.Now()) },
		},
		{
			name:       "renewal at the deadline",
			setUp:      func(l *testLock) { l.clock.Step(testRenewDeadline) },
			record:     func(l *testLock) resourcelock.LeaderElectionRecord { return ownRecord(1, l.clock.Now()) },
			wantLapsed: true,
		},
		{
			name:       "renewal after a long pause",
			setUp:      func(l *testLock) { l.clock.Step(time.Hour) },
			record:     func(l *testLock) resourcelock.LeaderElectionRecord { return ownRecord(1, l.clock.Now()) },
			wantLapsed: true,
		},
		{
			// client-go's round ended (OnStoppedLeading); the next round
			// starts a new claim.
			name: "new claim after the round stopped",
			setUp: func(l *testLock) {
				l.clock.Step(time.Hour)
				l.tracker.stoppedLeading()
			},
			record: func(l *testLock) resourcelock.LeaderElectionRecord { return ownRecord(2, l.clock.Now()) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get", "update"}, newLease("", 0, t0))
			if _, _, err := l.Get(ctx); err != nil {
				t.Fatalf("Get: %v", err)
			}
			if err := l.Update(ctx, ownRecord(1, l.clock.Now())); err != nil {
				t.Fatalf("first Update: %v", err)
			}
			tc.setUp(l)
			updatesBefore := countActions(l.client, "update")

			err := l.Update(ctx, tc.record(l))
			updates := countActions(l.client, "update") - updatesBefore
			if tc.wantLapsed {
				if !errors.Is(err, errClaimLapsed) {
					t.Errorf("Update error = %v, want errClaimLapsed", err)
				}
				if l.lapses != 1 {
					t.Errorf("onLapse called %d times, want 1", l.lapses)
				}
				if updates != 0 {
					t.Errorf("%d update requests sent for a lapsed claim, want 0", updates)
				}
				if l.tracker.Snapshot().IsLeader {
					t.Error("IsLeader = true after a refused renewal")
				}
				return
			}
			if err != nil {
				t.Errorf("Update: %v", err)
			}
			if l.lapses != 0 {
				t.Errorf("onLapse called %d times, want 0", l.lapses)
			}
			if updates != 1 {
				t.Errorf("%d update requests sent, want 1", updates)
			}
			if !l.tracker.Snapshot().IsLeader {
				t.Error("IsLeader = false after a successful write")
			}
		})
	}
}

// TestLockTakingBackAnEndedClaimStartsANewTerm: a claim of this process
// that ended (its round stopped after a lapse, or its renewal was answered
// only after the renew deadline) is taken back as a new term, with a token
// above the ended one's, never resumed under it: routing withdrawn under a
// token comes back only under a larger one (the admission policies refuse
// anything else).
func TestLockTakingBackAnEndedClaimStartsANewTerm(t *testing.T) {
	const firstToken = 1
	for _, tc := range []struct {
		name string
		// end ends the claim of token firstToken, written at t0.
		end func(ctx context.Context, t *testing.T, l *testLock)
	}{
		{
			name: "the round stopped after the claim lapsed",
			end: func(_ context.Context, _ *testing.T, l *testLock) {
				l.clock.Step(testRenewDeadline)
				l.tracker.stoppedLeading()
			},
		},
		{
			name: "a renewal answered after the deadline",
			end: func(ctx context.Context, t *testing.T, l *testLock) {
				// Sent a millisecond before the deadline, answered a
				// millisecond after it.
				l.clock.Step(testRenewDeadline - time.Millisecond)
				slow := true
				l.client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
					if slow {
						slow = false
						l.clock.Step(2 * time.Millisecond)
					}
					return false, nil, nil
				})
				if err := l.Update(ctx, ownRecord(firstToken, l.clock.Now())); err != nil {
					t.Fatalf("renewal: %v", err)
				}
				if s := l.tracker.Snapshot(); s.IsLeader {
					t.Errorf("IsLeader = true after a renewal answered past the deadline (token %d): the ended claim was resumed", s.FencingToken)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get", "update"}, newLease("", 0, t0))
			if _, _, err := l.Get(ctx); err != nil {
				t.Fatalf("Get: %v", err)
			}
			if err := l.Update(ctx, ownRecord(firstToken, l.clock.Now())); err != nil {
				t.Fatalf("first Update: %v", err)
			}
			if got := l.tracker.Snapshot().FencingToken; got != firstToken {
				t.Fatalf("first term's token = %d, want %d", got, firstToken)
			}
			tc.end(ctx, t, l)
			if _, _, err := l.Get(ctx); err != nil {
				t.Fatalf("Get: %v", err)
			}
			// client-go proposes the Lease's token again: the holder is
			// this identity.
			if err := l.Update(ctx, ownRecord(firstToken, l.clock.Now())); err != nil {
				t.Fatalf("taking the Lease back: %v", err)
			}
			s := l.tracker.Snapshot()
			onLease := int64(ptr.Deref(getLease(t, l.client).Spec.LeaseTransitions, 0))
			if !s.IsLeader || s.FencingToken <= firstToken || onLease != s.FencingToken {
				t.Errorf("after taking the Lease back: isLeader %v, token %d, Lease's token %d; want true and one token above %d", s.IsLeader, s.FencingToken, onLease, firstToken)
			}
		})
	}
}

func TestLockGetErrors(t *testing.T) {
	for _, tc := range []struct {
		name           string
		err            error
		wantReachedAPI bool
	}{
		{name: "not found", err: apierrors.NewNotFound(leasesResource, testName), wantReachedAPI: true},
		{name: "timeout", err: apierrors.NewTimeoutError("slow", 1), wantReachedAPI: false},
		{name: "connection refused", err: errors.New("dial tcp: connection refused"), wantReachedAPI: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			l := newTestLock(t, []string{"get"})
			l.client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			rec, _, err := l.Get(ctx)
			if err == nil || err.Error() != tc.err.Error() {
				t.Errorf("Get error = %v, want %v", err, tc.err)
			}
			if rec != nil {
				t.Errorf("Get record = %+v, want nil", rec)
			}
			if got := l.tracker.ReachedAPI(); got != tc.wantReachedAPI {
				t.Errorf("ReachedAPI() = %v, want %v", got, tc.wantReachedAPI)
			}
		})
	}
}

func TestLockDelegates(t *testing.T) {
	l := newTestLock(t, nil)
	if got := l.Identity(); got != testIdentity {
		t.Errorf("Identity() = %q, want %q", got, testIdentity)
	}
	if got, want := l.Describe(), testNamespace+"/"+testName; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	l.RecordEvent("became leader") // no recorder: must not panic
}

// capturedEvents records what client-go's LeaseLock hands its recorder.
type capturedEvents struct {
	mu                sync.Mutex // a running elector records from its own goroutines
	messages, objects []string
}

func (c *capturedEvents) Eventf(obj runtime.Object, eventType, reason, message string, args ...interface{}) {
	lease := obj.(*coordinationv1.Lease)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.messages = append(c.messages, eventType+" "+reason+" "+fmt.Sprintf(message, args...))
	c.objects = append(c.objects, lease.Namespace+"/"+lease.Name)
}

// recorded returns the messages so far.
func (c *capturedEvents) recorded() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.messages)
}

// client-go's "became leader" carries the token this process wrote — here
// one the lock raised above client-go's, after the Lease was deleted — and
// nothing is recorded before this process has written the Lease.
func TestLockRecordEventCarriesTheTerm(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "create"})
	events := &capturedEvents{}
	l.inner.LockConfig.EventRecorder = events
	l.RecordEvent("stopped leading")
	if len(events.messages) != 0 {
		t.Fatalf("recorded %v before any write", events.messages)
	}
	l.tracker.observeRead(other("pod-b", 5, t0))
	l.tracker.observeDeleted()
	if _, _, err := l.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get error = %v, want NotFound", err)
	}
	if err := l.Create(ctx, ownRecord(0, l.clock.Now())); err != nil {
		t.Fatalf("Create: %v", err)
	}
	l.RecordEvent("became leader")
	want := []string{"Normal LeaderElection " + testIdentity + " became leader (reason acquired, fencing token 6)"}
	if !slices.Equal(events.messages, want) || !slices.Equal(events.objects, []string{testNamespace + "/" + testName}) {
		t.Errorf("recorded %v about %v, want %v about the Lease", events.messages, events.objects, want)
	}
}

func TestRecordOfTruncatesToMicroseconds(t *testing.T) {
	renew := t0.Add(123456789 * time.Nanosecond)
	got := recordOf(&resourcelock.LeaderElectionRecord{
		HolderIdentity:       "pod-b",
		LeaseDurationSeconds: 15,
		RenewTime:            metav1.NewTime(renew),
		LeaderTransitions:    3,
	})
	want := record{holder: "pod-b", transitions: 3, durationSeconds: 15, renewTime: t0.Add(123456 * time.Microsecond)}
	if got != want {
		t.Errorf("recordOf() = %+v, want %+v", got, want)
	}
}

// Elector

func testConfig(client *fake.Clientset) Config {
	return Config{
		LeaseSpec: LeaseSpec{
			Namespace:         testNamespace,
			Name:              testName,
			Identity:          testIdentity,
			Timings:           leasetimings.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: testRenewDeadline, RetryPeriod: 2 * time.Second},
			ReleaseOnShutdown: true,
		},
		Client: client,
	}
}

func TestConfigValidate(t *testing.T) {
	client := fake.NewClientset()
	for _, tc := range []struct {
		name    string
		modify  func(c *Config)
		wantErr bool
	}{
		{name: "valid", modify: func(*Config) {}},
		{name: "no name", modify: func(c *Config) { c.Name = "" }, wantErr: true},
		{name: "no namespace", modify: func(c *Config) { c.Namespace = "" }, wantErr: true},
		{name: "no identity", modify: func(c *Config) { c.Identity = "" }, wantErr: true},
		{name: "zero retry period", modify: func(c *Config) { c.RetryPeriod = 0 }, wantErr: true},
		{name: "fractional lease duration", modify: func(c *Config) { c.LeaseDuration = 15500 * time.Millisecond }, wantErr: true},
		{name: "lease duration equal to renew deadline", modify: func(c *Config) { c.LeaseDuration = testRenewDeadline }, wantErr: true},
		{name: "renew deadline equal to retry period × 1.2", modify: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 25*time.Second, 12*time.Second, 10*time.Second
		}, wantErr: true},
		{name: "renew deadline just above retry period × 1.2", modify: func(c *Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 25*time.Second, 12*time.Second+time.Millisecond, 10*time.Second
		}},
		{name: "no client", modify: func(c *Config) { c.Client = nil }, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(client)
			tc.modify(&cfg)
			_, err := New(cfg)
			if (err != nil) != tc.wantErr {
				t.Errorf("New() error = %v, want error: %v", err, tc.wantErr)
			}
		})
	}
}

func TestElectorReleaseNotLeader(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setUp func(e *Elector)
	}{
		{name: "never led", setUp: func(*Elector) {}},
		{name: "another pod holds the lease", setUp: func(e *Elector) { e.tracker.observeRead(other("pod-b", 2, t0)) }},
		{
			// Leader by the tracker's account, but no round of client-go's
			// elector is running to stop.
			name:  "not running",
			setUp: func(e *Elector) { e.tracker.observeWrite(e.clock.Now(), own(2, t0)) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			client := newFakeClient(t, nil)
			e, err := New(testConfig(client))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(e.tracker.stop)
			tc.setUp(e)
			s, err := e.Release(ctx)
			if !errors.Is(err, leadership.ErrNotLeader) {
				t.Errorf("Release error = %v, want leadership.ErrNotLeader", err)
			}
			if s.Identity != testIdentity {
				t.Errorf("Release state identity = %q, want %q", s.Identity, testIdentity)
			}
			if n := len(client.Actions()); n != 0 {
				t.Errorf("Release made %d API calls, want 0", n)
			}
		})
	}
}

// TestElectorGuardedRelease checks that the release writes the Lease only if
// it still names this process's own term.
func TestElectorGuardedRelease(t *testing.T) {
	t.Parallel()
	const ownToken = 3
	for _, tc := range []struct {
		name string
		// ownTerm arranges for this process to have written ownToken.
		ownTerm bool
		lease   *coordinationv1.Lease
		// cached, if set, is what the Lease cache holds: a version the API
		// server has moved on from.
		cached *coordinationv1.Lease
		// conflicts is how many updates fail with a conflict first.
		conflicts   int
		verbs       []string
		wantErr     bool
		wantUpdates int
		// wantCleared: the Lease's holder is cleared; else it is unchanged.
		wantCleared bool
		wantHolder  string
		wantToken   int64
	}{
		{
			name:        "own term is cleared",
			ownTerm:     true,
			lease:       newLease(testIdentity, ownToken, t0),
			verbs:       []string{"get", "update"},
			wantUpdates: 1,
			wantCleared: true,
			wantHolder:  "",
			wantToken:   ownToken,
		},
		{
			name:       "another holder is left alone",
			ownTerm:    true,
			lease:      newLease("pod-b", ownToken+1, t0),
			verbs:      []string{"get"},
			wantHolder: "pod-b",
			wantToken:  ownToken + 1,
		},
		{
			name:       "own identity in another term is left alone",
			ownTerm:    true,
			lease:      newLease(testIdentity, ownToken+1, t0),
			verbs:      []string{"get"},
			wantHolder: testIdentity,
			wantToken:  ownToken + 1,
		},
		{
			name:       "released lease is left alone",
			ownTerm:    true,
			lease:      newLease("", ownToken, t0),
			verbs:      []string{"get"},
			wantHolder: "",
			wantToken:  ownToken,
		},
		{
			name:    "missing lease",
			ownTerm: true,
			verbs:   []string{"get"},
			// The tracker keeps what it last knew.
			wantHolder: testIdentity,
			wantToken:  ownToken,
		},
		{
			name:       "no own term: no request at all",
			lease:      newLease("pod-b", ownToken, t0),
			wantHolder: "",
		},
		{
			name:        "conflict: read and checked again",
			ownTerm:     true,
			lease:       newLease(testIdentity, ownToken, t0),
			conflicts:   1,
			verbs:       []string{"get", "update"},
			wantUpdates: 2,
			wantCleared: true,
			wantHolder:  "",
			wantToken:   ownToken,
		},
		{
			name:        "conflicts every time",
			ownTerm:     true,
			lease:       newLease(testIdentity, ownToken, t0),
			conflicts:   100,
			verbs:       []string{"get", "update"},
			wantErr:     true,
			wantUpdates: 3,
			wantHolder:  testIdentity,
			wantToken:   ownToken,
		},
		{
			// The cache still shows this pod's term, but pod-b has taken
			// the Lease since: the write, conditional on the cached
			// resourceVersion, fails; the fresh read shows pod-b.
			name:    "stale cache naming our term",
			ownTerm: true,
			lease: func() *coordinationv1.Lease {
				l := newLease("pod-b", ownToken+1, t0)
				l.ResourceVersion = "100"
				return l
			}(),
			cached:      newLease(testIdentity, ownToken, t0),
			verbs:       []string{"get", "update"},
			wantUpdates: 1,
			wantHolder:  "pod-b",
			wantToken:   ownToken + 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The Lease cache is not running: its first read waits for it
			// for a second before reading directly.
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			var objs []runtime.Object
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			client := newFakeClient(t, tc.verbs, objs...)
			conflicts := tc.conflicts
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if conflicts > 0 {
					conflicts--
					return true, nil, apierrors.NewConflict(leasesResource, testName, errors.New("changed"))
				}
				return false, nil, nil
			})
			cfg := testConfig(client)
			cfg.Clock = newTestClock()
			e, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(e.tracker.stop)
			if tc.ownTerm {
				e.tracker.observeWrite(e.clock.Now(), own(ownToken, t0))
				// The round has ended; the tracker no longer claims.
				e.tracker.setClaiming(false, leadership.ReasonReleased)
			}
			if tc.cached != nil {
				primeCache(e.cache, tc.cached)
			}

			err = e.release(ctx)
			if (err != nil) != tc.wantErr {
				t.Errorf("release error = %v, want error: %v", err, tc.wantErr)
			}
			if got := countActions(client, "update"); got != tc.wantUpdates {
				t.Errorf("%d updates, want %d", got, tc.wantUpdates)
			}
			if !tc.ownTerm && len(client.Actions()) > 0 {
				t.Errorf("%d requests without an own term, want none", len(client.Actions()))
			}
			s := e.Snapshot()
			if s.Holder != tc.wantHolder || s.FencingToken != tc.wantToken || s.IsLeader {
				t.Errorf("holder, token, isLeader = %q, %d, %v; want %q, %d, false", s.Holder, s.FencingToken, s.IsLeader, tc.wantHolder, tc.wantToken)
			}
			if tc.lease == nil {
				return
			}
			got := getLease(t, client)
			wantLeaseHolder := ptr.Deref(tc.lease.Spec.HolderIdentity, "")
			if tc.wantCleared {
				wantLeaseHolder = ""
				if d := ptr.Deref(got.Spec.LeaseDurationSeconds, 0); d != 1 {
					t.Errorf("released Lease duration = %d, want 1", d)
				}
			}
			if h := ptr.Deref(got.Spec.HolderIdentity, ""); h != wantLeaseHolder {
				t.Errorf("Lease holder = %q, want %q", h, wantLeaseHolder)
			}
			if tr := ptr.Deref(got.Spec.LeaseTransitions, -1); tr != ptr.Deref(tc.lease.Spec.LeaseTransitions, -1) {
				t.Errorf("Lease transitions = %d, want %d (a release does not start a term)", tr, ptr.Deref(tc.lease.Spec.LeaseTransitions, -1))
			}
		})
	}
}

// primeCache makes c hold lease as if its watch had delivered it.
func primeCache(c *leasecache.Cache, lease *coordinationv1.Lease) {
	c.Observe(lease)
	c.Synced()
}

// runElector runs e until the test ends. stop ends Run and returns its
// result; it may be called more than once.
func runElector(t *testing.T, ctx context.Context, e *Elector) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = e.Run(ctx)
	}()
	stop = func() error {
		cancel()
		select {
		case <-done:
			return err
		case <-time.After(wait.ForeverTestTimeout):
			t.Error("Run did not return after its context ended")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// newFastElector returns a test context, the fake API server and an
// elector on it with fastConfig, not running yet.
func newFastElector(t *testing.T) (context.Context, *fake.Clientset, *Elector) {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	e, err := New(fastConfig(client))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return ctx, client, e
}

// fastConfig uses short real durations: client-go's elector runs on the real
// clock.
func fastConfig(client *fake.Clientset) Config {
	cfg := testConfig(client)
	cfg.LeaseDuration = 2 * time.Second
	cfg.RenewDeadline = time.Second
	cfg.RetryPeriod = 200 * time.Millisecond
	return cfg
}

func leaseHolder(t *testing.T, client *fake.Clientset) (string, int32) {
	t.Helper()
	lease := getLease(t, client)
	return ptr.Deref(lease.Spec.HolderIdentity, ""), ptr.Deref(lease.Spec.LeaseTransitions, -1)
}

// electorVerbs are the requests a running elector makes.
var electorVerbs = []string{"get", "create", "update", "list", "watch"}

func TestElectorRunReleaseAndShutdown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name              string
		releaseOnShutdown bool
		wantHolderAfter   string
	}{
		{name: "release on shutdown", releaseOnShutdown: true, wantHolderAfter: ""},
		{name: "lease left to expire", releaseOnShutdown: false, wantHolderAfter: testIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			client := newFakeClient(t, electorVerbs)
			cfg := fastConfig(client)
			cfg.ReleaseOnShutdown = tc.releaseOnShutdown
			e, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if err := e.Candidate(); err == nil {
				t.Error("Candidate() = nil before Run")
			}
			stop := runElector(t, ctx, e)
			waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
			if err := e.Candidate(); err != nil {
				t.Errorf("Candidate() = %v while running", err)
			}
			if err := e.Healthy(); err != nil {
				t.Errorf("Healthy() = %v while leading", err)
			}
			if holder, _ := leaseHolder(t, client); holder != testIdentity {
				t.Errorf("Lease holder = %q, want %q", holder, testIdentity)
			}

			if err := stop(); err != nil {
				t.Errorf("Run: %v", err)
			}
			if e.Snapshot().IsLeader {
				t.Error("IsLeader = true after Run returned")
			}
			if holder, _ := leaseHolder(t, client); holder != tc.wantHolderAfter {
				t.Errorf("Lease holder after shutdown = %q, want %q", holder, tc.wantHolderAfter)
			}
			if err := e.Candidate(); err == nil {
				t.Error("Candidate() = nil after Run returned")
			}
		})
	}
}

func TestElectorRunReleaseOnRequest(t *testing.T) {
	t.Parallel()
	ctx, client, e := newFastElector(t)
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	_, token := leaseHolder(t, client)

	s, err := e.Release(ctx)
	if err != nil {
		t.Fatalf("Release: %v", err)
	}
	if s.IsLeader || s.Holder != "" || s.FencingToken != int64(token) {
		t.Errorf("state after Release: isLeader, holder, token = %v, %q, %d; want false, \"\", %d", s.IsLeader, s.Holder, s.FencingToken, token)
	}
	if holder, transitions := leaseHolder(t, client); holder != "" || transitions != token {
		t.Errorf("Lease after Release: holder %q, transitions %d; want \"\", %d", holder, transitions, token)
	}
	// Sitting out: a second release finds no leader.
	if _, err := e.Release(ctx); !errors.Is(err, leadership.ErrNotLeader) {
		t.Errorf("second Release error = %v, want leadership.ErrNotLeader", err)
	}
}

// TestElectorPreviousIncarnation starts the elector on a Lease that already
// names its identity: it must not continue that term, but wait for it to
// expire and start a new one with a greater fencing token.
func TestElectorPreviousIncarnation(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	lease := newLease(testIdentity, 7, time.Now())
	lease.Spec.LeaseDurationSeconds = ptr.To[int32](2)
	client := newFakeClient(t, electorVerbs, lease)
	e, err := New(fastConfig(client))
	if err != nil {
		t.Fatalf("New: %v", err)
	}

	// Record every state published until leadership.
	var (
		mu     sync.Mutex
		states []leadership.State
	)
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		s, changed := e.Watch()
		for {
			mu.Lock()
			states = append(states, s)
			mu.Unlock()
			select {
			case <-changed:
			case <-watchCtx.Done():
				return
			}
			s, changed = e.Watch()
		}
	}()

	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	stopWatching()
	<-watched

	if s := e.Snapshot(); s.FencingToken != 8 {
		t.Errorf("FencingToken = %d, want 8 (a new term)", s.FencingToken)
	}
	if holder, transitions := leaseHolder(t, client); holder != testIdentity || transitions != 8 {
		t.Errorf("Lease holder, transitions = %q, %d; want %q, 8", holder, transitions, testIdentity)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range states {
		if s.IsLeader && s.FencingToken != 8 {
			t.Errorf("claimed leadership with fencing token %d: %+v", s.FencingToken, s)
		}
	}
}

// TestElectorRunReleaseRetriedAfterAFailedWrite: a release whose write
// fails (the API server refused it, or did not answer within
// releaseTimeout) is tried again while the claim it ends could still be
// renewed, instead of leaving the Lease to expire: at 1,024 partitions on
// a loaded API server that left an acknowledged handover unowned for a
// lease duration.
func TestElectorRunReleaseRetriedAfterAFailedWrite(t *testing.T) {
	t.Parallel()
	ctx, client, e := newFastElector(t)
	// The reactor is set before Run: the fake's reactors may not change
	// while it serves.
	var refused atomic.Int32
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(lease.Spec.HolderIdentity, "") == "" && refused.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("the API server is overloaded")
		}
		return false, nil, nil
	})
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	_, token := leaseHolder(t, client)
	if _, err := e.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if n := refused.Load(); n != 3 {
		t.Errorf("%d clearing writes, want 3 (two refused, then the one that cleared it)", n)
	}
	if holder, transitions := leaseHolder(t, client); holder != "" || transitions != token {
		t.Errorf("Lease after Release: holder %q, transitions %d; want \"\", %d", holder, transitions, token)
	}
}

// TestElectorRunSkipsTheRenewalRightAfterTaking: client-go renews at once
// after it acquires; that write carries nothing new and is answered without
// being sent, so the second write of a term comes a retry period after the
// first, and the renewals go on from there.
func TestElectorRunSkipsTheRenewalRightAfterTaking(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	// A retry period of a second: the skip needs the renewal within half of
	// it, so a stall of the race-built test under load does not send it.
	cfg := fastConfig(client)
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 4*time.Second, 2*time.Second, time.Second
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	var mu sync.Mutex
	var own []time.Time
	record := func(action k8stesting.Action) (bool, runtime.Object, error) {
		lease := action.(interface{ GetObject() runtime.Object }).GetObject().(*coordinationv1.Lease)
		if ptr.Deref(lease.Spec.HolderIdentity, "") == testIdentity {
			mu.Lock()
			own = append(own, time.Now())
			mu.Unlock()
		}
		return false, nil, nil
	}
	client.PrependReactor("update", "leases", record)
	client.PrependReactor("create", "leases", record)
	runElector(t, ctx, e)
	retry := cfg.RetryPeriod
	waitFor(t, ctx, "three writes of the term", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(own) >= 3
	})
	if !e.Snapshot().IsLeader {
		t.Fatalf("not leading after three writes of its term")
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := own[1].Sub(own[0]); gap < retry/2 {
		t.Errorf("the second write of the term came %v after the first, want at least half a retry period (%v): client-go's renewal right after the acquisition was sent", gap, retry/2)
	}
}
