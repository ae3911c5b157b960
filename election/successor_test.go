package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// startCandidates runs a leader (testIdentity, naming whoever successor
// returns) and followers on one fake API server, and waits until every
// follower has seen the leader's term.
func startCandidates(t *testing.T, ctx context.Context, client *fake.Clientset, successor SuccessorPicker, followers ...string) (*Elector, map[string]*Elector) {
	t.Helper()
	cfg := fastConfig(client)
	cfg.Successor = successor
	leader, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	runElector(t, ctx, leader)
	waitFor(t, ctx, "the first pod to lead", func() bool { return leader.Snapshot().IsLeader })
	out := map[string]*Elector{}
	for _, id := range followers {
		cfg := fastConfig(client)
		cfg.Identity = id
		e, err := New(cfg)
		if err != nil {
			t.Fatalf("New(%s): %v", id, err)
		}
		runElector(t, ctx, e)
		waitFor(t, ctx, id+" to follow", func() bool { return e.Snapshot().Holder == testIdentity })
		out[id] = e
	}
	return leader, out
}

// writesBy counts the Lease updates, from the index'th action on, that
// write holder into the Lease (attempts included, refused or not).
func writesBy(client *fake.Clientset, from int, holder string) int {
	n := 0
	for _, a := range client.Actions()[from:] {
		u, ok := a.(k8stesting.UpdateAction)
		if !ok {
			continue
		}
		if l, ok := u.GetObject().(*coordinationv1.Lease); ok && ptr.Deref(l.Spec.HolderIdentity, "") == holder {
			n++
		}
	}
	return n
}

// TestReleaseHandsOverToNamedSuccessor: the release names the successor
// in its own write; the successor takes the Lease and no other candidate
// even tries (a race would show as their writes), and the successor's
// write removes the name.
func TestReleaseHandsOverToNamedSuccessor(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	others := []string{"pod-b", "pod-c", "pod-d", "pod-e"}
	leader, followers := startCandidates(t, ctx, client, func(int64) string { return "pod-d" }, others...)
	_, token := leaseHolder(t, client)

	from := len(client.Actions())
	if _, err := leader.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitFor(t, ctx, "pod-d to lead", func() bool { return followers["pod-d"].Snapshot().IsLeader })
	// Past the others' deferral: had they raced, their writes are in.
	time.Sleep(fastConfig(client).RetryPeriod + schedulingSlack)

	lease := getLease(t, client)
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "pod-d" {
		t.Fatalf("holder %q, want pod-d", holder)
	}
	if got := ptr.Deref(lease.Spec.LeaseTransitions, 0); int64(got) <= int64(token) {
		t.Errorf("token %d after handover, want above %d", got, token)
	}
	if v, ok := lease.Annotations[SuccessorAnnotation]; ok {
		t.Errorf("successor annotation %q left on the successor's term", v)
	}
	for _, id := range []string{"pod-b", "pod-c", "pod-e"} {
		if n := writesBy(client, from, id); n != 0 {
			t.Errorf("%s wrote the Lease %d times after a release to pod-d", id, n)
		}
	}
	if n := writesBy(client, from, ""); n != 1 {
		t.Errorf("%d release writes, want 1 (naming the successor in it)", n)
	}
}

// TestReleaseToGoneSuccessor: the named successor never takes the Lease
// (gone, or a stranger named by hand); another candidate takes it one
// retry period after the release, not before.
func TestReleaseToGoneSuccessor(t *testing.T) {
	t.Parallel()
	_, ctx := ktesting.NewTestContext(t)
	client := newFakeClient(t, electorVerbs)
	leader, followers := startCandidates(t, ctx, client, func(int64) string { return "pod-gone" }, "pod-b")
	retry := fastConfig(client).RetryPeriod

	released := time.Now()
	if _, err := leader.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if got := getLease(t, client).Annotations[SuccessorAnnotation]; got != "pod-gone" {
		t.Fatalf("released Lease names %q, want pod-gone", got)
	}
	waitFor(t, ctx, "pod-b to lead", func() bool { return followers["pod-b"].Snapshot().IsLeader })
	took := time.Since(released)
	if took < retry {
		t.Errorf("pod-b took the Lease %v after the release, before the successor's retry period %v", took, retry)
	}
	if took > retry+schedulingSlack {
		t.Errorf("pod-b took the Lease %v after the release, want within a retry period %v + slack %v", took, retry, schedulingSlack)
	}
}

// TestPickSuccessorNeverSelf: a picker that names the releasing pod
// itself names no one.
func TestPickSuccessorNeverSelf(t *testing.T) {
	cfg := testConfig(fake.NewClientset())
	cfg.Successor = func(int64) string { return testIdentity }
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if got := e.pickSuccessor(3); got != "" {
		t.Errorf("pickSuccessor = %q, want none", got)
	}
}

// TestDropSuccessor: only this candidate's own acquisition drops the name.
func TestDropSuccessor(t *testing.T) {
	named := newLease("", 4, time.Now())
	nameSuccessor(named, "pod-b")
	if got := dropSuccessor(named, "pod-b"); got.Annotations[SuccessorAnnotation] != "pod-b" {
		t.Error("a release naming pod-b lost the name")
	}
	taken := named.DeepCopy()
	taken.Spec.HolderIdentity = ptr.To("pod-b")
	if got := dropSuccessor(taken, "pod-b"); got.Annotations[SuccessorAnnotation] != "" {
		t.Error("pod-b's acquisition kept the name")
	}
	if taken.Annotations[SuccessorAnnotation] != "pod-b" {
		t.Error("dropSuccessor changed its argument")
	}
	nameSuccessor(named, "")
	if _, ok := named.Annotations[SuccessorAnnotation]; ok {
		t.Error("naming none left the annotation")
	}
}

// TestReleaseRecordsTheSuccessor: a release that names a successor records
// an Event that says whom, after client-go's "stopped leading" (recorded
// before the successor is picked); a release that names none records no
// such Event.
func TestReleaseRecordsTheSuccessor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, successor string }{{"named", "pod-b"}, {"none", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			client := newFakeClient(t, electorVerbs)
			events := &capturedEvents{}
			cfg := fastConfig(client)
			cfg.Events = events
			cfg.Successor = func(int64) string { return tc.successor }
			leader, err := New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			runElector(t, ctx, leader)
			waitFor(t, ctx, "the pod to lead", func() bool { return leader.Snapshot().IsLeader })
			_, token := leaseHolder(t, client)
			if _, err := leader.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			handover := fmt.Sprintf("Normal LeaderElection %s handed over to pod-b, the successor it named (fencing token %d)", testIdentity, token)
			if tc.successor == "" {
				waitFor(t, ctx, `"stopped leading"`, func() bool {
					return slices.ContainsFunc(events.recorded(), func(m string) bool { return strings.Contains(m, "stopped leading") })
				})
				if got := events.recorded(); slices.ContainsFunc(got, func(m string) bool { return strings.Contains(m, "handed over") }) {
					t.Errorf("a release without a successor recorded %v", got)
				}
				return
			}
			waitFor(t, ctx, "the handover Event", func() bool { return slices.Contains(events.recorded(), handover) })
			got := events.recorded()
			stopped := slices.IndexFunc(got, func(m string) bool { return strings.Contains(m, "stopped leading") })
			if stopped < 0 || stopped > slices.Index(got, handover) {
				t.Errorf("Events %q: want \"stopped leading\" before the handover", got)
			}
		})
	}
}

// TestBeforeReleaseRunsWhileLeading: a graceful release calls the
// before-release hook first, with the term's fencing token, while the pod
// still leads and the Lease still names it; a release by a pod that does
// not lead, or of another term, does not call it.
func TestBeforeReleaseRunsWhileLeading(t *testing.T) {
	t.Parallel()
	ctx, client, leader := newFastElector(t)
	type call struct {
		token   int64
		leading bool
		holder  string
	}
	var calls []call
	resumed := 0
	leader.SetBeforeRelease(func(_ context.Context, token int64) func() {
		holder, _ := leaseHolder(t, client)
		calls = append(calls, call{token: token, leading: leader.Snapshot().IsLeader, holder: holder})
		return func() { resumed++ }
	})
	runElector(t, ctx, leader)
	waitFor(t, ctx, "the pod to lead", func() bool { return leader.Snapshot().IsLeader })
	_, transitions := leaseHolder(t, client)
	token := int64(transitions)
	if _, err := leader.ReleaseTerm(ctx, token+1); !errors.Is(err, leadership.ErrOtherTerm) {
		t.Fatalf("ReleaseTerm of another term: %v, want ErrOtherTerm", err)
	}
	if len(calls) != 0 {
		t.Fatalf("a release of another term called the hook: %+v", calls)
	}
	if _, err := leader.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if want := []call{{token: token, leading: true, holder: testIdentity}}; !slices.Equal(calls, want) {
		t.Errorf("hook calls %+v, want %+v", calls, want)
	}
	if _, err := leader.Release(ctx); !errors.Is(err, leadership.ErrNotLeader) {
		t.Fatalf("a second Release: %v, want ErrNotLeader", err)
	}
	if len(calls) != 1 {
		t.Errorf("a release by a pod that no longer leads called the hook: %+v", calls)
	}
	if resumed != 0 {
		t.Errorf("a release that happened resumed the term %d times", resumed)
	}
}

// TestFollowAfterRun: after Run has returned (a shutdown that released the
// Lease), Follow keeps the stopped elector's view current: it sees the
// next leader, and that leader's release; it never claims.
func TestFollowAfterRun(t *testing.T) {
	t.Parallel()
	ctx, client, leader := newFastElector(t)
	stop := runElector(t, ctx, leader)
	waitFor(t, ctx, "the first pod to lead", func() bool { return leader.Snapshot().IsLeader })
	cfg := fastConfig(client)
	cfg.Identity = "pod-b"
	next, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	runElector(t, ctx, next)
	waitFor(t, ctx, "pod-b to follow", func() bool { return next.Snapshot().Holder == testIdentity })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	followCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); leader.Follow(followCtx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, ctx, "pod-b to lead", func() bool { return next.Snapshot().IsLeader })
	waitFor(t, ctx, "the stopped pod to see pod-b lead", func() bool { return leader.Snapshot().Holder == "pod-b" })
	if _, err := next.ReleaseFor(ctx, time.Minute); err != nil {
		t.Fatalf("Release: %v", err)
	}
	waitFor(t, ctx, "the stopped pod to see the release", func() bool { return leader.Snapshot().Holder == "" })
	if s := leader.Snapshot(); s.IsLeader {
		t.Errorf("a following elector leads: %+v", s)
	}
	if holder, _ := leaseHolder(t, client); holder == testIdentity {
		t.Error("a following elector took the Lease")
	}
}
