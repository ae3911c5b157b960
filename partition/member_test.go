package partition

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/internal/leasetest"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/ownership"
)

const (
	testNamespace = "default"
	testGroup     = "g"
	testIdentity  = "pod-a"
	// The elector's client-go loop renews every retry period of real time
	// (it has no clock to inject); a short one keeps the tests quick. The
	// lease duration and renew deadline count on the fake clock only.
	testLeaseDuration = 15 * time.Second
	testRenewDeadline = 10 * time.Second
	testRetryPeriod   = 250 * time.Millisecond
	// maxStep is the longest single step of the fake clock: shorter than
	// the renew deadline, so that this pod's claims, renewed just before a
	// step, are still valid after it.
	maxStep = 4 * time.Second
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

var (
	leasesResource = leasetest.Resource
	leasesGVR      = leasetest.GVR
)

// asyncClock is a FakeClock whose AfterFunc callbacks run on their own
// goroutine, as time.AfterFunc's do (the electors require it: FakeClock
// runs them while holding its own lock, and they read the clock).
type asyncClock struct {
	*clocktesting.FakeClock
}

func (c asyncClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.FakeClock.AfterFunc(d, func() { go f() })
}

// memberTest is one Member (pod-a) on a fake API server and a fake clock;
// the test plays the other pods of the group by writing their Leases.
type memberTest struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	clock  asyncClock
	m      *Member
}

// partitionLease is partition i's Lease as a pod that holds it (or, with
// holder "", released it) leaves it.
func partitionLease(i int, holder string, token int32) *coordinationv1.Lease {
	return groupLease(PartitionLease(testGroup, i), KindPartition, holder, token)
}

// memberLease is the membership Lease of a live pod.
func memberLease(identity string) *coordinationv1.Lease {
	return groupLease(MemberLease(testGroup, identity), KindMember, identity, 1)
}

func groupLease(name, kind, holder string, token int32) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, ResourceVersion: "1", Labels: leaseLabels(testGroup, kind)},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To(int32(testLeaseDuration / time.Second)),
			AcquireTime:          &metav1.MicroTime{Time: t0},
			RenewTime:            &metav1.MicroTime{Time: t0},
			LeaseTransitions:     ptr.To(token),
		},
	}
}

// newFakeAPI returns the fake API server (leasetest) holding objs, which
// allows the Member's requests on Leases and fails the test on any other
// call. It also refuses, and fails the test on, any write by which
// identity takes a Lease another pod holds and has renewed within its lease
// duration on clk: a pod never owns a partition another pod holds.
func newFakeAPI(t *testing.T, clk clock.PassiveClock, identity string, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	return leasetest.NewClient(t, leasetest.Config{
		Verbs: []string{"get", "list", "watch", "create", "update", "delete"},
		CheckUpdate: func(current, lease *coordinationv1.Lease) error {
			if holder := ptr.Deref(current.Spec.HolderIdentity, ""); ptr.Deref(lease.Spec.HolderIdentity, "") == identity && holder != "" && holder != identity && heldAt(current, clk.Now()) {
				t.Errorf("%s took Lease %s while %s held it (renewed %v, now %v)", identity, lease.Name, holder, current.Spec.RenewTime, clk.Now())
				return apierrors.NewConflict(leasesResource, lease.Name, fmt.Errorf("held by %s", holder))
			}
			return nil
		},
	}, objs...)
}

// heldAt reports whether the Lease's holder may still claim it at now.
func heldAt(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil {
		return true
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	return now.Before(l.Spec.RenewTime.Add(d))
}

// startMember runs pod-a's Member of a group of n partitions on a fake API
// server holding leases, until the test ends.
func startMember(t *testing.T, n int, leases ...runtime.Object) *memberTest {
	t.Helper()
	return startMemberOn(t, n, func(*fake.Clientset) {}, leases...)
}

// startMemberOn is startMember with prepare run on the fake API server
// before the Member starts.
func startMemberOn(t *testing.T, n int, prepare func(*fake.Clientset), leases ...runtime.Object) *memberTest {
	t.Helper()
	return startMemberWith(t, n, func(*Config) {}, prepare, leases...)
}

// startMemberWith is startMemberOn with configure run on the Member's
// Config.
func startMemberWith(t *testing.T, n int, configure func(*Config), prepare func(*fake.Clientset), leases ...runtime.Object) *memberTest {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	clk := asyncClock{clocktesting.NewFakeClock(t0)}
	client := newFakeAPI(t, clk, testIdentity, leases...)
	prepare(client)
	cfg := Config{
		LeaseSpec: election.LeaseSpec{Namespace: testNamespace, Name: testGroup, Identity: testIdentity,
			Timings: leasetimings.Timings{LeaseDuration: testLeaseDuration, RenewDeadline: testRenewDeadline, RetryPeriod: testRetryPeriod}},
		Partitions: n, Client: client, Clock: clk,
	}
	configure(&cfg)
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		checkNoTermCutShort(t, m)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait.ForeverTestTimeout):
			t.Errorf("Run did not return after its context ended")
		}
	})
	return &memberTest{t: t, ctx: ctx, client: client, clock: clk, m: m}
}

// checkNoTermCutShort fails the test if, while the Member ran, it stopped
// the elector of a partition it held (its term ended for "shutdown" before
// the Member's context did): the partition would stay unowned for a lease
// duration. stopIdleLocked must never do that, however an acquisition and
// a reconcile interleave.
func checkNoTermCutShort(t *testing.T, m *Member) {
	t.Helper()
	for i, e := range m.partitions {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(e.Collectors()...)
		families, err := reg.Gather()
		if err != nil {
			t.Fatalf("gather partition %d's metrics: %v", i, err)
		}
		for _, f := range families {
			if f.GetName() != "leader_elector_transitions_total" {
				continue
			}
			for _, metric := range f.GetMetric() {
				for _, l := range metric.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == string(leadership.ReasonShutdown) && metric.GetCounter().GetValue() > 0 {
						t.Errorf("partition %d: %v terms ended for %q while the Member ran: it stopped an elector that held its partition", i, metric.GetCounter().GetValue(), l.GetValue())
					}
				}
			}
		}
	}
}

// waitFor polls pod-a's published state until cond holds.
func (mt *memberTest) waitFor(what string, cond func(ownership.State) bool) ownership.State {
	mt.t.Helper()
	var s ownership.State
	err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		s = mt.m.Snapshot()
		return cond(s), nil
	})
	if err != nil {
		mt.t.Fatalf("waiting for %s: %v\nstate: %+v\nleases: %s", what, err, s, mt.describeLeases())
	}
	return s
}

// waitForLease polls the API server's Lease name until cond holds.
func (mt *memberTest) waitForLease(what, name string, cond func(*coordinationv1.Lease) bool) {
	mt.t.Helper()
	err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		l, err := mt.lease(name)
		return err == nil && cond(l), nil
	})
	if err != nil {
		mt.t.Fatalf("waiting for %s: %v\nstate: %+v\nleases: %s", what, err, mt.m.Snapshot(), mt.describeLeases())
	}
}

func (mt *memberTest) lease(name string) (*coordinationv1.Lease, error) {
	obj, err := mt.client.Tracker().Get(leasesGVR, testNamespace, name)
	if err != nil {
		return nil, err
	}
	return obj.(*coordinationv1.Lease), nil
}

func (mt *memberTest) holder(name string) string {
	mt.t.Helper()
	l, err := mt.lease(name)
	if err != nil {
		mt.t.Fatalf("get Lease %s: %v", name, err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

func (mt *memberTest) leases() []*coordinationv1.Lease {
	mt.t.Helper()
	list, err := mt.client.Tracker().List(leasesGVR, coordinationv1.SchemeGroupVersion.WithKind("Lease"), testNamespace)
	if err != nil {
		mt.t.Fatalf("list Leases: %v", err)
	}
	var out []*coordinationv1.Lease
	for i := range list.(*coordinationv1.LeaseList).Items {
		out = append(out, &list.(*coordinationv1.LeaseList).Items[i])
	}
	return out
}

func (mt *memberTest) describeLeases() string {
	var b strings.Builder
	for _, l := range mt.leases() {
		fmt.Fprintf(&b, "\n  %s: holder %q token %d renewed %v", l.Name, ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, 0), l.Spec.RenewTime)
	}
	return b.String()
}

// write changes Lease name as another pod would, on the current version.
func (mt *memberTest) write(name string, change func(*coordinationv1.Lease)) {
	mt.t.Helper()
	leases := mt.client.CoordinationV1().Leases(testNamespace)
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(mt.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(l)
		_, err = leases.Update(mt.ctx, l, metav1.UpdateOptions{})
		return err
	}); err != nil {
		mt.t.Fatalf("write Lease %s: %v", name, err)
	}
}

// take makes identity the holder of partition i with the next token, as
// that pod's elector would, and waits until pod-a has observed it: pod-a
// counts the new holder's lease duration from its observation, so a clock
// step before it would push the expiry the test computes.
func (mt *memberTest) take(i int, identity string) {
	mt.t.Helper()
	now := metav1.NewMicroTime(mt.clock.Now())
	var token int32
	mt.write(PartitionLease(testGroup, i), func(l *coordinationv1.Lease) {
		token = ptr.Deref(l.Spec.LeaseTransitions, 0) + 1
		l.Spec.HolderIdentity = ptr.To(identity)
		l.Spec.LeaseTransitions = ptr.To(token)
		l.Spec.LeaseDurationSeconds = ptr.To(int32(testLeaseDuration / time.Second))
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	})
	err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		s := mt.m.partitions[i].Snapshot()
		return s.Holder == identity && s.FencingToken >= int64(token), nil
	})
	if err != nil {
		mt.t.Fatalf("waiting for pod-a to observe %s take partition %d: %v", identity, i, err)
	}
}

// release clears partition i's holder, as its holder's elector does.
func (mt *memberTest) release(i int) {
	mt.t.Helper()
	now := metav1.NewMicroTime(mt.clock.Now())
	mt.write(PartitionLease(testGroup, i), func(l *coordinationv1.Lease) {
		l.Spec.HolderIdentity = ptr.To("")
		l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	})
}

// join creates the membership Lease of identity, held and renewed now.
func (mt *memberTest) join(identity string) {
	mt.t.Helper()
	l := memberLease(identity)
	l.ResourceVersion = ""
	now := metav1.NewMicroTime(mt.clock.Now())
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	if _, err := mt.client.CoordinationV1().Leases(testNamespace).Create(mt.ctx, l, metav1.CreateOptions{}); err != nil {
		mt.t.Fatalf("create membership Lease of %s: %v", identity, err)
	}
}

// leave deletes the membership Lease of identity, as its elector does on
// shutdown.
func (mt *memberTest) leave(identity string) {
	mt.t.Helper()
	if err := mt.client.CoordinationV1().Leases(testNamespace).Delete(mt.ctx, MemberLease(testGroup, identity), metav1.DeleteOptions{}); err != nil {
		mt.t.Fatalf("delete membership Lease of %s: %v", identity, err)
	}
}

// advance steps the fake clock by d. The other pods named in live renew
// every Lease they hold before each step; after each step it waits for
// pod-a to renew its own claims (its client-go loop renews every retry
// period of real time), so that only what the test lets expire expires.
func (mt *memberTest) advance(d time.Duration, live ...string) {
	mt.t.Helper()
	for d > 0 {
		for _, l := range mt.leases() {
			if holder := ptr.Deref(l.Spec.HolderIdentity, ""); slices.Contains(live, holder) {
				now := metav1.NewMicroTime(mt.clock.Now())
				mt.write(l.Name, func(l *coordinationv1.Lease) { l.Spec.RenewTime = &now })
			}
		}
		step := min(d, maxStep)
		mt.clock.Step(step)
		d -= step
		renewedBy := mt.clock.Now().Add(testRenewDeadline)
		mt.waitFor("pod-a to renew its claims after the clock moved", func(s ownership.State) bool {
			if !s.Member || mt.m.membership.Snapshot().ValidUntil.Before(renewedBy) {
				return false
			}
			for _, o := range s.Owned {
				if o.ValidUntil.Before(renewedBy) {
					return false
				}
			}
			return true
		})
	}
}

// settle runs one reconcile of pod-a at once, so that what it would do on
// its own next wake-up is done before the test looks. reconcile decides and
// records under the Member's lock, so running it beside Run's loop is safe.
func (mt *memberTest) settle() {
	mt.m.reconcile(mt.ctx)
}

// checkStateFollowsLeases fails the test unless the published state shows
// as owned exactly the partition Leases that name pod-a, with their tokens.
func (mt *memberTest) checkStateFollowsLeases(s ownership.State) {
	mt.t.Helper()
	tokens := map[int]int64{}
	for i := range s.Partitions {
		l, err := mt.lease(PartitionLease(testGroup, i))
		if err == nil && ptr.Deref(l.Spec.HolderIdentity, "") == testIdentity {
			tokens[i] = int64(ptr.Deref(l.Spec.LeaseTransitions, 0))
		}
	}
	got := map[int]int64{}
	for _, o := range s.Owned {
		got[o.Partition] = o.FencingToken
		if !o.ValidUntil.After(mt.clock.Now()) {
			mt.t.Errorf("partition %d shown owned until %v, not after now (%v)", o.Partition, o.ValidUntil, mt.clock.Now())
		}
	}
	if !reflect.DeepEqual(got, tokens) {
		mt.t.Errorf("state shows owned partitions (with tokens) %v, the Leases name pod-a on %v", got, tokens)
	}
}

// checkHandingOver fails the test unless, once the release of the partition
// handed over has returned and pod-a has reconciled, that partition is still
// the one handed over and pod-a still owns want.
func (mt *memberTest) checkHandingOver(partition int, want []int) {
	mt.t.Helper()
	if err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		mt.m.mu.Lock()
		defer mt.m.mu.Unlock()
		return mt.m.releasing == 0, nil
	}); err != nil {
		mt.t.Fatalf("waiting for the release of partition %d to return: %v", partition, err)
	}
	mt.settle()
	mt.m.mu.Lock()
	handover := mt.m.handover
	mt.m.mu.Unlock()
	if handover != partition {
		mt.t.Fatalf("the partition handed over is %d (-1: none) while partition %d is not taken yet, want %d", handover, partition, partition)
	}
	if got := ownedPartitions(mt.m.Snapshot()); !reflect.DeepEqual(got, want) {
		mt.t.Fatalf("owns %v while partition %d is not taken yet, want %v", got, partition, want)
	}
}

func ownedPartitions(s ownership.State) []int {
	out := []int{}
	for _, o := range s.Owned {
		out = append(out, o.Partition)
	}
	return out
}

func tokenOf(s ownership.State, partition int) int64 {
	for _, o := range s.Owned {
		if o.Partition == partition {
			return o.FencingToken
		}
	}
	return -1
}

// gateAdmits asks the gate both ways (Admits, then Admit) and fails the
// test if they disagree.
func (mt *memberTest) gateAdmits() bool {
	mt.t.Helper()
	g := gate{mt.m, 0}
	admits := g.Admits()
	done, ok := g.Admit()
	if ok {
		done()
	}
	if admits != ok {
		mt.t.Errorf("gate: Admits() = %t but Admit() = %t", admits, ok)
	}
	return ok
}

func (mt *memberTest) rebalances() float64 {
	mt.t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(mt.m.metrics.rebalances)
	families, err := reg.Gather()
	if err != nil || len(families) != 1 {
		mt.t.Fatalf("gather rebalances: %v (%d families)", err, len(families))
	}
	return families[0].GetMetric()[0].GetCounter().GetValue()
}

// TestMemberTakesItsFairShare: a live member takes free partitions up to
// its target and no further (the gate refuses a new term once it holds
// its share), never one another pod holds, and publishes what it owns, the
// members and the fair share as the Leases show them.
func TestMemberTakesItsFairShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		partitions int
		leases     []runtime.Object
		// wantOwned is how many partitions pod-a ends up owning;
		// wantOthers are the other pods' partitions, which stay theirs.
		wantOwned          int
		wantOthers         map[int]string
		wantMembers        int
		wantLo, wantHi     int
		wantAdmits         bool
		wantFreePartitions int
	}{
		{
			name:       "alone: takes every partition, then the gate is closed",
			partitions: 4,
			leases:     []runtime.Object{partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3)},
			wantOwned:  4, wantMembers: 1, wantLo: 4, wantHi: 4,
		},
		{
			// 4 partitions over 3 members: one member owns 2. pod-b owns 1,
			// pod-c none, so the larger share is pod-a's once it owns 1
			// (ties go by identity); a partition stays free for pod-c.
			name:       "at the fair share max the gate refuses a free partition",
			partitions: 4,
			leases: []runtime.Object{memberLease("pod-b"), memberLease("pod-c"),
				partitionLease(0, "pod-b", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3)},
			wantOwned: 2, wantOthers: map[int]string{0: "pod-b"}, wantMembers: 3, wantLo: 1, wantHi: 2,
			wantFreePartitions: 1,
		},
		{
			// pod-b owns 3 of 4 (more than its share of 2) and keeps
			// renewing: pod-a, below its share, only takes the free one.
			name:       "below the fair share it never takes a partition another pod holds",
			partitions: 4,
			leases: []runtime.Object{memberLease("pod-b"),
				partitionLease(0, "pod-b", 3), partitionLease(1, "pod-b", 3), partitionLease(2, "pod-b", 3), partitionLease(3, "", 3)},
			wantOwned: 1, wantOthers: map[int]string{0: "pod-b", 1: "pod-b", 2: "pod-b"}, wantMembers: 2, wantLo: 2, wantHi: 2,
			wantAdmits: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mt := startMember(t, tc.partitions, tc.leases...)
			// A member above the floor of its share takes its one more
			// among the partitions free for longFreeAfter (FreeToTry).
			mt.waitFor("pod-a a member", func(s ownership.State) bool { return s.Member && s.Members == tc.wantMembers })
			mt.settle()
			mt.clock.Step(mt.m.longFreeAfter())
			s := mt.waitFor(fmt.Sprintf("pod-a to own %d partitions", tc.wantOwned), func(s ownership.State) bool {
				return s.Member && s.Members == tc.wantMembers && len(s.Owned) == tc.wantOwned
			})
			mt.settle()
			if admits := mt.gateAdmits(); admits != tc.wantAdmits {
				t.Errorf("gate admits = %t, want %t (owns %d, members %d)", admits, tc.wantAdmits, len(s.Owned), s.Members)
			}
			s = mt.m.Snapshot()
			if len(s.Owned) != tc.wantOwned {
				t.Errorf("owns %v after settling, want %d partitions", ownedPartitions(s), tc.wantOwned)
			}
			if s.FairShareMin != tc.wantLo || s.FairShareMax != tc.wantHi || s.Partitions != tc.partitions || s.Identity != testIdentity {
				t.Errorf("state %+v, want fair share %d..%d of %d partitions", s, tc.wantLo, tc.wantHi, tc.partitions)
			}
			for _, o := range s.Owned {
				// Tokens grow from one holder to the next.
				if o.FencingToken <= 3 {
					t.Errorf("partition %d owned with token %d, want above the released Lease's 3", o.Partition, o.FencingToken)
				}
			}
			mt.checkStateFollowsLeases(s)
			free := 0
			for i := range tc.partitions {
				holder := mt.holder(PartitionLease(testGroup, i))
				if want, ok := tc.wantOthers[i]; ok && holder != want {
					t.Errorf("partition %d held by %q, want %q", i, holder, want)
				}
				if holder == "" {
					free++
				}
			}
			if free != tc.wantFreePartitions {
				t.Errorf("%d partitions free, want %d:%s", free, tc.wantFreePartitions, mt.describeLeases())
			}
		})
	}
}

// TestMemberNotAMemberTakesNothing: while this pod does not hold its
// membership Lease it is not counted, so it has no share: the gate refuses
// and it owns nothing, even with every partition free.
func TestMemberNotAMemberTakesNothing(t *testing.T) {
	t.Parallel()
	refused := make(chan struct{})
	var once sync.Once
	mt := startMemberOn(t, 2, func(c *fake.Clientset) {
		c.PrependReactor("create", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
			if action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).Name != MemberLease(testGroup, testIdentity) {
				return false, nil, nil
			}
			once.Do(func() { close(refused) })
			return true, nil, apierrors.NewForbidden(leasesResource, "membership", errors.New("refused by the test"))
		})
	}, partitionLease(0, "", 3), partitionLease(1, "", 3))
	select {
	case <-refused:
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("pod-a never tried to create its membership Lease")
	}
	mt.settle()
	if mt.gateAdmits() {
		t.Errorf("gate admits a pod that is not a member")
	}
	if s := mt.m.Snapshot(); s.Member || len(s.Owned) != 0 || s.Members != 0 {
		t.Errorf("state %+v, want not a member, no members, nothing owned", s)
	}
	if err := mt.m.Ready(); err == nil {
		t.Errorf("Ready() = nil for a pod that is not a member")
	}
}

// TestMemberHandsOverAboveItsFairShare: when a member joins, a pod above its
// fair share hands partitions over, the highest first and one at a time (the
// next only once the last is taken, or after a lease duration if nobody
// takes it), down to its share, and never takes a handed-over one back.
func TestMemberHandsOverAboveItsFairShare(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// takeOver: pod-b takes each partition handed over; otherwise
		// nobody does.
		takeOver bool
	}{
		{name: "the new member takes each partition handed over", takeOver: true},
		{name: "nobody takes it: the next goes after a lease duration", takeOver: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mt := startMember(t, 4, partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "", 3), partitionLease(3, "", 3))
			mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == 4 })
			before, changed := mt.m.Watch()

			mt.join("pod-b")
			s := mt.waitFor("pod-a to see pod-b join", func(s ownership.State) bool { return s.Members == 2 })
			if s.FairShareMin != 2 || s.FairShareMax != 2 {
				t.Errorf("fair share %d..%d with 2 members, want 2..2", s.FairShareMin, s.FairShareMax)
			}
			if s.Revision <= before.Revision {
				t.Errorf("revision %d after a member joined, was %d", s.Revision, before.Revision)
			}
			select {
			case <-changed:
			default:
				t.Errorf("Watch channel not closed when a member joined")
			}

			// The highest goes first.
			mt.waitForLease("pod-a to hand partition 3 over", PartitionLease(testGroup, 3), func(l *coordinationv1.Lease) bool {
				return ptr.Deref(l.Spec.HolderIdentity, "") == ""
			})
			// One at a time: while partition 3 is free, partition 2 stays.
			mt.checkHandingOver(3, []int{0, 1, 2})

			if tc.takeOver {
				mt.take(3, "pod-b")
			} else {
				// Almost a lease duration: partition 2 still stays.
				mt.advance(testLeaseDuration-time.Second, "pod-b")
				mt.checkHandingOver(3, []int{0, 1, 2})
				mt.advance(time.Second, "pod-b")
			}
			mt.waitForLease("pod-a to hand partition 2 over", PartitionLease(testGroup, 2), func(l *coordinationv1.Lease) bool {
				return ptr.Deref(l.Spec.HolderIdentity, "") == ""
			})
			if tc.takeOver {
				mt.take(2, "pod-b")
			}
			mt.waitFor("pod-a to own its fair share", func(s ownership.State) bool { return len(s.Owned) == 2 })
			mt.settle()
			s = mt.m.Snapshot()
			if got := ownedPartitions(s); !reflect.DeepEqual(got, []int{0, 1}) {
				t.Errorf("owns %v, want [0 1]", got)
			}
			for _, i := range []int{0, 1} {
				if tokenOf(s, i) != tokenOf(before, i) {
					t.Errorf("partition %d: token %d, was %d: a partition kept must keep its term", i, tokenOf(s, i), tokenOf(before, i))
				}
			}
			if mt.gateAdmits() {
				t.Errorf("gate admits at the fair share")
			}
			if n := mt.rebalances(); n != 2 {
				t.Errorf("rebalances = %v, want 2", n)
			}
			if err := mt.m.Ready(); err != nil {
				t.Errorf("Ready: %v", err)
			}
			mt.checkStateFollowsLeases(s)
			wantHolder := map[bool]string{true: "pod-b", false: ""}[tc.takeOver]
			for _, i := range []int{2, 3} {
				if holder := mt.holder(PartitionLease(testGroup, i)); holder != wantHolder {
					t.Errorf("partition %d held by %q, want %q", i, holder, wantHolder)
				}
			}
		})
	}
}

// TestMemberTakesOverWhenAMemberLeaves: when a member leaves, the others'
// fair share grows and they take its partitions — at once if it released
// them, only after they expire if it died; never while its claim lasts.
func TestMemberTakesOverWhenAMemberLeaves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		leave func(mt *memberTest)
	}{
		{
			name: "shut down: released its partitions and deleted its membership",
			leave: func(mt *memberTest) {
				mt.release(2)
				mt.release(3)
				mt.leave("pod-b")
			},
		},
		{
			name: "died: its Leases expire",
			leave: func(mt *memberTest) {
				// Almost a lease duration: still a member, still its
				// partitions (the fake API server fails the test if
				// pod-a takes one before they expire).
				mt.advance(testLeaseDuration - time.Second)
				if s := mt.m.Snapshot(); s.Members != 2 || len(s.Owned) != 2 {
					mt.t.Fatalf("before pod-b's Leases expired: %d members, owns %v; want 2 members, [0 1]", s.Members, ownedPartitions(s))
				}
				// Past expiry (the attempt is timed a millisecond after).
				mt.advance(2 * time.Second)
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mt := startMember(t, 4, memberLease("pod-b"),
				partitionLease(0, "", 3), partitionLease(1, "", 3), partitionLease(2, "pod-b", 7), partitionLease(3, "pod-b", 7))
			before := mt.waitFor("pod-a to own its fair share", func(s ownership.State) bool { return s.Members == 2 && len(s.Owned) == 2 })
			if got := ownedPartitions(before); !reflect.DeepEqual(got, []int{0, 1}) {
				t.Fatalf("owns %v, want the free [0 1]", got)
			}
			tc.leave(mt)
			s := mt.waitFor("pod-a to take every partition", func(s ownership.State) bool { return s.Members == 1 && len(s.Owned) == 4 })
			if s.FairShareMin != 4 || s.FairShareMax != 4 {
				t.Errorf("fair share %d..%d alone, want 4..4", s.FairShareMin, s.FairShareMax)
			}
			if s.Revision <= before.Revision {
				t.Errorf("revision %d, was %d", s.Revision, before.Revision)
			}
			for _, i := range []int{2, 3} {
				if token := tokenOf(s, i); token <= 7 {
					t.Errorf("partition %d taken over with token %d, want above pod-b's 7", i, token)
				}
			}
			mt.checkStateFollowsLeases(s)
		})
	}
}

// TestMemberReadyWhileSettling: a member below its fair share is ready
// while the group may still be settling (a lease duration and four retry
// periods after the members last changed), not after; owning its share
// makes it ready again.
func TestMemberReadyWhileSettling(t *testing.T) {
	t.Parallel()
	// pod-b holds 3 of 4 partitions and keeps renewing them: pod-a owns
	// only the free one, below its share of 2.
	mt := startMember(t, 4, memberLease("pod-b"),
		partitionLease(0, "pod-b", 3), partitionLease(1, "pod-b", 3), partitionLease(2, "pod-b", 3), partitionLease(3, "", 3))
	mt.waitFor("pod-a to own partition 3", func(s ownership.State) bool { return s.Members == 2 && len(s.Owned) == 1 })
	if err := mt.m.Ready(); err != nil {
		t.Errorf("Ready while settling: %v", err)
	}
	bound := testLeaseDuration + 4*testRetryPeriod
	mt.advance(bound-time.Second, "pod-b")
	if err := mt.m.Ready(); err != nil {
		t.Errorf("Ready a second before the settling bound: %v", err)
	}
	mt.advance(time.Second, "pod-b")
	err := mt.m.Ready()
	if err == nil || !strings.Contains(err.Error(), "below its fair share of 2") {
		t.Errorf("Ready past the settling bound = %v, want below its fair share of 2", err)
	}
	// pod-b hands one over: pod-a takes it and is ready again.
	mt.release(2)
	mt.waitFor("pod-a to take partition 2", func(s ownership.State) bool { return len(s.Owned) == 2 })
	if err := mt.m.Ready(); err != nil {
		t.Errorf("Ready at the fair share: %v", err)
	}
}

// joinWithN creates the membership Lease of identity publishing n as its
// partition count, as a member of this version does ("" publishes none, as
// an older version).
func (mt *memberTest) joinWithN(identity, n string) {
	mt.t.Helper()
	l := memberLease(identity)
	l.ResourceVersion = ""
	if n != "" {
		l.Labels[PartitionsLabel] = n
	}
	now := metav1.NewMicroTime(mt.clock.Now())
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	if _, err := mt.client.CoordinationV1().Leases(testNamespace).Create(mt.ctx, l, metav1.CreateOptions{}); err != nil {
		mt.t.Fatalf("create membership Lease of %s: %v", identity, err)
	}
}

// TestMemberPublishesItsPartitionCount: the membership Lease carries the
// pod's N, so that members with another N learn it.
func TestMemberPublishesItsPartitionCount(t *testing.T) {
	t.Parallel()
	mt := startMember(t, 12)
	mt.waitForLease("pod-a's membership Lease to carry its N", MemberLease(testGroup, testIdentity), func(l *coordinationv1.Lease) bool {
		return l.Labels[PartitionsLabel] == "12" && ptr.Deref(l.Spec.HolderIdentity, "") == testIdentity
	})
}

// TestMemberMixedPartitionCounts: pod-a, at N=8, owns all 8 partitions; a
// member at N=4 joins (a rolling update to 4). pod-a works with the
// effective N=4: it gives up 4..7 at once (nobody is to take them, so it
// does not wait for each to be taken), hands 2..3 over as any surplus, and
// never takes a partition at 4 or above, even below its share. When the
// member at 4 leaves, N is 8 again. A member that publishes no N (an older
// version) counts as a member but not for N.
func TestMemberMixedPartitionCounts(t *testing.T) {
	t.Parallel()
	var leases []runtime.Object
	for i := range 8 {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMember(t, 8, leases...)
	mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == 8 && s.EffectivePartitions == 8 })

	mt.joinWithN("pod-old", "")
	s := mt.waitFor("pod-a to count the member without an N", func(s ownership.State) bool { return s.Members == 2 })
	if s.EffectivePartitions != 8 || s.FairShareMin != 4 {
		t.Errorf("with a member that publishes no N: effective N %d, fair share %d, want 8 and 4", s.EffectivePartitions, s.FairShareMin)
	}
	mt.leave("pod-old")
	mt.waitFor("pod-a to see pod-old leave", func(s ownership.State) bool { return s.Members == 1 })

	mt.joinWithN("pod-b", "4")
	s = mt.waitFor("pod-a to see pod-b's N", func(s ownership.State) bool { return s.Members == 2 && s.EffectivePartitions == 4 })
	if s.Partitions != 8 || s.FairShareMin != 2 || s.FairShareMax != 2 {
		t.Errorf("state %+v: want its own 8 partitions and a fair share of 2..2 of the effective 4", s)
	}
	// 4..7 go together, without waiting for anyone to take them; of
	// 0..3 the highest goes first.
	for i := 3; i < 8; i++ {
		mt.waitForLease(fmt.Sprintf("pod-a to give up partition %d", i), PartitionLease(testGroup, i), func(l *coordinationv1.Lease) bool {
			return ptr.Deref(l.Spec.HolderIdentity, "") == ""
		})
	}
	mt.take(3, "pod-b")
	mt.waitForLease("pod-a to hand partition 2 over", PartitionLease(testGroup, 2), func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == ""
	})
	mt.take(2, "pod-b")
	s = mt.waitFor("pod-a to own its share of the effective N", func(s ownership.State) bool { return len(s.Owned) == 2 })
	if got := ownedPartitions(s); !reflect.DeepEqual(got, []int{0, 1}) {
		t.Errorf("owns %v, want [0 1]", got)
	}
	if err := mt.m.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}

	// pod-b leaves: the effective N is pod-a's own again.
	mt.leave("pod-b")
	mt.advance(testLeaseDuration, "")
	s = mt.waitFor("pod-a to own all 8 again", func(s ownership.State) bool { return s.EffectivePartitions == 8 && len(s.Owned) == 8 })
	mt.checkStateFollowsLeases(s)
}

// TestMemberBelowItsShareTakesNothingBeyondTheEffectiveN: pod-b, at N=4,
// holds 3 of the 4 partitions (more than its share) and keeps renewing;
// pod-a, at N=8 and below its share of 2, takes the one free partition below
// 4 and none of the free 4..7: the gate admits a new term below the
// effective N only.
func TestMemberBelowItsShareTakesNothingBeyondTheEffectiveN(t *testing.T) {
	t.Parallel()
	member := memberLease("pod-b")
	member.Labels[PartitionsLabel] = "4"
	leases := []runtime.Object{member, partitionLease(0, "pod-b", 3), partitionLease(1, "pod-b", 3), partitionLease(2, "pod-b", 3)}
	for i := 3; i < 8; i++ {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMember(t, 8, leases...)
	// assess reads the membership before the partitions: under load, the
	// first state that shows partition 3 owned may have read the membership
	// before pod-a held it.
	s := mt.waitFor("pod-a to take partition 3", func(s ownership.State) bool { return len(s.Owned) == 1 && s.Member })
	mt.settle()
	if s.EffectivePartitions != 4 || s.FairShareMin != 2 {
		t.Errorf("effective N %d, fair share %d; want 4 and 2", s.EffectivePartitions, s.FairShareMin)
	}
	if got := ownedPartitions(mt.m.Snapshot()); !reflect.DeepEqual(got, []int{3}) {
		t.Errorf("owns %v, want [3]", got)
	}
	// Partition 3's acquisition may not have returned yet: its term,
	// already shown owned, counts once, not twice. Marked admitted here so
	// that the check does not depend on when the write returns.
	mt.m.mu.Lock()
	inFlight := mt.m.admitted[3]
	mt.m.admitted[3] = true
	mt.m.mu.Unlock()
	if !(gate{mt.m, 1}).Admits() {
		t.Errorf("below its share, the gate refuses partition 1, below the effective N")
	}
	mt.m.mu.Lock()
	if !inFlight {
		delete(mt.m.admitted, 3)
	}
	mt.m.mu.Unlock()
	for i := 4; i < 8; i++ {
		if (gate{mt.m, i}).Admits() {
			t.Errorf("the gate admits partition %d, beyond the effective N 4", i)
		}
		if holder := mt.holder(PartitionLease(testGroup, i)); holder != "" {
			t.Errorf("partition %d, beyond the effective N, held by %q", i, holder)
		}
	}
}

// TestMemberDrainsPartitionsBeyondTheEffectiveN: with a drain timeout, the
// partitions beyond the effective N are shown draining with the surplus, so
// the app can checkpoint them; one the app releases is given up at once, the
// rest at the deadline.
func TestMemberDrainsPartitionsBeyondTheEffectiveN(t *testing.T) {
	t.Parallel()
	var leases []runtime.Object
	for i := range 4 {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMemberWith(t, 4, func(c *Config) { c.DrainTimeout = 30 * time.Second }, func(*fake.Clientset) {}, leases...)
	mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == 4 })

	mt.joinWithN("pod-b", "2")
	s := mt.waitFor("pod-a to drain its surplus", func(s ownership.State) bool {
		draining := 0
		for _, o := range s.Owned {
			if o.Draining {
				draining++
			}
		}
		return s.EffectivePartitions == 2 && draining == 3
	})
	for _, o := range s.Owned {
		if want := o.Partition >= 1; o.Draining != want {
			t.Errorf("partition %d draining %t, want %t", o.Partition, o.Draining, want)
		}
	}
	if _, err := mt.m.Release(mt.ctx, 3); err != nil {
		t.Fatalf("release draining partition 3: %v", err)
	}
	mt.m.mu.Lock()
	handover := mt.m.handover
	mt.m.mu.Unlock()
	if handover == 3 {
		t.Errorf("partition 3, beyond the effective N, is the handover to wait for")
	}
	mt.advance(30*time.Second, "pod-b")
	mt.waitForLease("pod-a to give up partition 2 at the deadline", PartitionLease(testGroup, 2), func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == ""
	})
	mt.waitForLease("pod-a to hand partition 1 over at the deadline", PartitionLease(testGroup, 1), func(l *coordinationv1.Lease) bool {
		return ptr.Deref(l.Spec.HolderIdentity, "") == ""
	})
	s = mt.waitFor("pod-a to own its share", func(s ownership.State) bool { return len(s.Owned) == 1 })
	if got := ownedPartitions(s); !reflect.DeepEqual(got, []int{0}) {
		t.Errorf("owns %v, want [0]", got)
	}
}

// TestMemberRunsElectorsForItsShareOnly: an elector runs only for a
// partition this pod holds or wants; the others follow their Leases without
// one, and this pod still takes them as soon as they are free: released by
// their holder, or expired when it died.
func TestMemberRunsElectorsForItsShareOnly(t *testing.T) {
	t.Parallel()
	leases := []runtime.Object{memberLease("pod-b")}
	for i := range 8 {
		holder := "pod-b"
		if i >= 6 {
			holder = ""
		}
		leases = append(leases, partitionLease(i, holder, 3))
	}
	mt := startMember(t, 8, leases...)
	waitForRuns := func(what string, want []int) {
		t.Helper()
		var got []int
		err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
			mt.settle()
			got = mt.running()
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("%s: electors run for partitions %v, want %v", what, got, want)
		}
	}

	mt.waitFor("pod-a to take the free partitions", func(s ownership.State) bool { return len(s.Owned) == 2 })
	waitForRuns("owning 2 of a share of 4, none other free", []int{6, 7})
	// Followed without an elector of their own.
	if h := mt.m.partitions[0].Snapshot().Holder; h != "pod-b" {
		t.Errorf("partition 0 shown held by %q, want pod-b", h)
	}

	mt.release(5)
	mt.waitFor("pod-a to take the partition pod-b released", func(s ownership.State) bool { return len(s.Owned) == 3 })
	waitForRuns("after pod-b released partition 5", []int{5, 6, 7})

	// pod-b dies: its Leases expire, and pod-a takes them all.
	mt.advance(testLeaseDuration + 2*time.Second)
	s := mt.waitFor("pod-a to take every partition", func(s ownership.State) bool { return s.Members == 1 && len(s.Owned) == 8 })
	waitForRuns("owning every partition", []int{0, 1, 2, 3, 4, 5, 6, 7})
	mt.checkStateFollowsLeases(s)
}

// running returns the partitions whose electors run and are not stopping.
func (mt *memberTest) running() []int {
	mt.m.mu.Lock()
	defer mt.m.mu.Unlock()
	var out []int
	for i, r := range mt.m.runs {
		if !r.stopping {
			out = append(out, i)
		}
	}
	slices.Sort(out)
	return out
}

// TestGateRefusesAStoppingElector: the gate that admits a new term refuses
// it to an elector being stopped, so that no acquisition is written while
// its elector shuts down (it would leave the Lease naming this pod, held by
// no one, for a lease duration).
func TestGateRefusesAStoppingElector(t *testing.T) {
	t.Parallel()
	mt := startMember(t, 4, memberLease("pod-b"),
		partitionLease(0, "pod-b", 3), partitionLease(1, "pod-b", 3), partitionLease(2, "pod-b", 3), partitionLease(3, "", 3))
	mt.waitFor("pod-a to take the free partition", func(s ownership.State) bool { return s.Members == 2 && len(s.Owned) == 1 })
	// Below its share, pod-a's gate admits partition 0 — except while
	// another of its electors holds an admission for an attempt in flight
	// (they campaign against pod-b's Leases), a window a loaded machine
	// widens: so wait for a moment with none, rather than take one sample.
	if err := wait.PollUntilContextTimeout(mt.ctx, time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		return (gate{mt.m, 0}).Admits(), nil
	}); err != nil {
		t.Fatal("gate refuses a member below its share")
	}
	mt.m.mu.Lock()
	mt.m.runs[0] = &run{stop: func() {}, stopping: true}
	mt.m.mu.Unlock()
	if mt.gateAdmits() {
		t.Error("gate admits a new term to an elector being stopped")
	}
	mt.m.mu.Lock()
	delete(mt.m.runs, 0)
	mt.m.mu.Unlock()
}

// TestMemberCreatesEveryMissingLease: in a new group a member creates every
// missing partition Lease at once, not only those of its share, so that the
// wait of a lease duration before a Lease created without a holder may be
// taken runs for all of them from the start.
func TestMemberCreatesEveryMissingLease(t *testing.T) {
	t.Parallel()
	mt := startMember(t, 8, memberLease("pod-b"))
	err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		for i := range 8 {
			if _, err := mt.lease(PartitionLease(testGroup, i)); err != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not every partition Lease was created (pod-a's share is 4 of 8):%s", mt.describeLeases())
	}
	// Created, they need no elector until wanted.
	mt.waitFor("pod-a to own nothing yet (the Leases have no history)", func(s ownership.State) bool { return len(s.Owned) == 0 })
	var running []int
	if err := wait.PollUntilContextTimeout(mt.ctx, 5*time.Millisecond, wait.ForeverTestTimeout, true, func(context.Context) (bool, error) {
		mt.settle()
		running = mt.running()
		return len(running) <= 4, nil
	}); err != nil {
		t.Errorf("electors run for partitions %v once the Leases exist, want at most pod-a's share of 4", running)
	}
}

// TestMemberTakesAPreferredShareFirst: members below their targets split
// the free partitions (FreeToTry's preferred takers), so pod-a first takes
// only those it is the preferred taker of; the others it takes once they
// have been free for longFreeAfter and pod-b (played by the test, which
// takes nothing) has not taken them.
func TestMemberTakesAPreferredShareFirst(t *testing.T) {
	t.Parallel()
	leases := []runtime.Object{memberLease("pod-b")}
	for i := range 6 {
		leases = append(leases, partitionLease(i, "", 3))
	}
	needy := []string{"pod-a", "pod-b"}
	var preferred []int
	for i := range 6 {
		if preferredTaker(i, needy) == testIdentity {
			preferred = append(preferred, i)
		}
	}
	if len(preferred) == 0 || len(preferred) >= 3 {
		t.Fatalf("pod-a is the preferred taker of %v of 6: the test needs between 1 and 2 (its target is 3)", preferred)
	}
	mt := startMember(t, 6, leases...)
	mt.waitFor("pod-a to own its preferred partitions", func(s ownership.State) bool {
		return s.Members == 2 && len(s.Owned) == len(preferred)
	})
	// One more reconcile, run here: it starts an elector for every
	// partition it tries (startLocked, under the Member's lock), so the
	// electors running right after it are what it decided to try.
	mt.settle()
	if got := mt.running(); !reflect.DeepEqual(got, preferred) {
		t.Fatalf("before the others were long free pod-a runs electors for %v, want only its preferred %v", got, preferred)
	}
	if got := ownedPartitions(mt.m.Snapshot()); !reflect.DeepEqual(got, preferred) {
		t.Fatalf("before the others were long free pod-a owns %v, want its preferred %v", got, preferred)
	}
	mt.clock.Step(mt.m.longFreeAfter())
	s := mt.waitFor("pod-a to own its target of 3", func(s ownership.State) bool { return len(s.Owned) == 3 })
	mt.checkStateFollowsLeases(s)
}

// TestMemberStateNeverGoesBack: readers that take the state while the
// member takes its partitions never see a later revision without a
// partition an earlier one showed owned (nothing is lost in this test).
// A view taken before the Member's lock and published after a newer one
// made the state go back for a moment, a new revision for every long-poll.
func TestMemberStateNeverGoesBack(t *testing.T) {
	t.Parallel()
	const n = 32
	var leases []runtime.Object
	for i := range n {
		leases = append(leases, partitionLease(i, "", 3))
	}
	mt := startMember(t, n, leases...)
	type seen struct {
		revision uint64
		owned    []int
	}
	var (
		mu  sync.Mutex
		all []seen
	)
	done := make(chan struct{})
	var readers sync.WaitGroup
	for range 8 {
		readers.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				s := mt.m.Snapshot()
				mu.Lock()
				all = append(all, seen{s.Revision, ownedPartitions(s)})
				mu.Unlock()
			}
		})
	}
	mt.waitFor("pod-a to own every partition", func(s ownership.State) bool { return len(s.Owned) == n })
	close(done)
	readers.Wait()
	slices.SortStableFunc(all, func(a, b seen) int { return cmp.Compare(a.revision, b.revision) })
	owned := map[int]uint64{}
	for _, s := range all {
		now := map[int]bool{}
		for _, i := range s.owned {
			now[i] = true
			if _, had := owned[i]; !had {
				owned[i] = s.revision
			}
		}
		for i, since := range owned {
			if !now[i] {
				t.Fatalf("revision %d does not show partition %d, owned since revision %d", s.revision, i, since)
			}
		}
	}
}
