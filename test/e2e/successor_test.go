//go:build integration

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/internal/racebackoff"
	"github.com/leader-elector/leader-elector/test/cluster"
)

// successorHandover bounds one handover after a candidate decides to take
// the Lease: client-go's new round and its write, a few round trips to the
// API server, and the test's poll (as in TestHealthStepDown).
const successorHandover = 2 * retryPeriod

// successorGroup starts health-gated candidates one after another (so the
// first leads, and revisions arrive in the order given), each with the
// revision and app health given, and waits until every candidate's entry
// says so and has been seen to change by the others.
// With healthy nil the candidates run --name-successor instead: no app to
// probe, every one healthy.
func successorGroup(t *testing.T, revisions []string, healthy []bool) (*group, []*appHealth) {
	t.Helper()
	lease := leaseName(t)
	createCandidatesLease(t, kubeStore(), lease)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	apps := make([]*appHealth, len(revisions))
	withApps := healthy != nil
	if !withApps {
		healthy = make([]bool, len(revisions))
		for i := range healthy {
			healthy[i] = true
		}
	}
	for i, rev := range revisions {
		args := []string{"--name-successor"}
		if withApps {
			apps[i] = newAppHealth(t, healthy[i])
			args = apps[i].args()
		}
		args = append(args, "--revision="+rev)
		g.Add(startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{lease: lease, extraArgs: args}))
		if i == 0 {
			g.WaitLeader(30 * time.Second)
		}
	}
	byName := map[string]bool{}
	for i, c := range g.Members() {
		byName[c.name] = healthy[i]
	}
	// Entries start unhealthy (seq 1) and are written again when they turn
	// healthy; each candidate counts the others' from its first read.
	waitEntries(t, kubeStore(), g, 1, func(name string) bool { return byName[name] })
	return g, apps
}

var successorLogged = regexp.MustCompile(`"Released lease".*successor="([^"]*)"`)

// namedSuccessor is the successor c's last release named, from its log.
func namedSuccessor(t *testing.T, c *candidate) string {
	t.Helper()
	var name string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		m := successorLogged.FindAllStringSubmatch(c.log(), -1)
		if len(m) == 0 {
			return false, nil
		}
		name = m[len(m)-1][1]
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s logged no release", c.name)
	}
	return name
}

// TestSuccessorHealthyNewestNamed: a release names the healthy candidate of
// the newest revision, never one of an older revision nor an unhealthy
// one, and it takes over within one handover, not a retry period later.
func TestSuccessorHealthyNewestNamed(t *testing.T) {
	g, _ := successorGroup(t, []string{"v1", "v1", "v2", "v2"}, []bool{true, true, true, false})
	members := g.Members()
	releaseToSuccessor(t, g, members[0], members[2], fmt.Sprintf("healthy, newest revision; %s is unhealthy, %s of the old revision", members[3].name, members[1].name))
}

// TestSuccessorWithoutHealthGating: --name-successor alone (no app health
// URL): a release names the candidate of the newest revision and it takes
// over within one handover; /readyz knows nothing of an app.
func TestSuccessorWithoutHealthGating(t *testing.T) {
	g, _ := successorGroup(t, []string{"v1", "v1", "v2"}, nil)
	members := g.Members()
	releaseToSuccessor(t, g, members[0], members[2], "newest revision, no health gating")
	code, body, err := members[1].probe("/readyz")
	if err != nil || strings.Contains(body, "app") {
		t.Errorf("a follower's /readyz = %d %q, %v; want nothing about an app", code, body, err)
	}
	if _, body, err := members[1].probe("/metrics"); err != nil || strings.Contains(body, "leader_elector_app_healthy") {
		t.Errorf("/metrics has leader_elector_app_healthy without an app to probe (%v)", err)
	}
}

// releaseToSuccessor: leader, leading, releases; the release names want
// (why says why it is the one) and want leads within one handover, before
// the others' retry period.
func releaseToSuccessor(t *testing.T, g *group, leader, want *candidate, why string) {
	t.Helper()
	if s, err := leader.state(); err != nil || !s.IsLeader {
		t.Fatalf("%s does not lead: %+v %v", leader.name, s, err)
	}
	start := time.Now()
	leader.release(t)
	next := g.WaitLeader(retryPeriod+successorHandover, leader)
	took := time.Since(start)
	t.Logf("MEASURED release to the named successor %s (%s): %v", next.name, why, took.Round(time.Millisecond))
	if got := namedSuccessor(t, leader); got != want.name {
		t.Errorf("release named %q, want %s (%s)", got, want.name, why)
	}
	if next != want {
		t.Errorf("%s leads, want the named successor %s", next.name, want.name)
	}
	if took >= retryPeriod {
		t.Errorf("the successor led %v after the release, not before the others' retry period %v", took, retryPeriod)
	}
}

// TestSuccessorGoneNextTakesOver: the named successor is dead (killed after
// its last entry, which is still fresh): another candidate takes over one
// retry period plus one handover after the release.
func TestSuccessorGoneNextTakesOver(t *testing.T) {
	g, _ := successorGroup(t, []string{"v1", "v1", "v2"}, []bool{true, true, true})
	members := g.Members()
	leader, other, doomed := members[0], members[1], members[2]
	doomed.signal(syscall.SIGKILL)
	if _, err := doomed.waitExit(5 * time.Second); err == nil {
		t.Log(doomed.name, "killed")
	}
	start := time.Now()
	leader.release(t)
	next := g.WaitLeader(retryPeriod+successorHandover+5*time.Second, leader, doomed)
	took := time.Since(start)
	t.Logf("MEASURED release to a dead successor → %s leads: %v (bound %v = retry period + %v handover)", next.name, took.Round(time.Millisecond), retryPeriod+successorHandover, successorHandover)
	if got := namedSuccessor(t, leader); got != doomed.name {
		t.Fatalf("release named %q, want %s (newest revision, entry still fresh)", got, doomed.name)
	}
	if next != other {
		t.Errorf("%s leads, want %s", next.name, other.name)
	}
	if took > retryPeriod+successorHandover {
		t.Errorf("took %v, more than a retry period and a handover (%v)", took, retryPeriod+successorHandover)
	}
}

// TestSuccessorStrangerIgnored: a release written by hand naming a pod that
// is no candidate: for one retry period from the write nobody takes the
// Lease, then a candidate does, within one handover.
func TestSuccessorStrangerIgnored(t *testing.T) {
	g, _ := successorGroup(t, []string{"v1", "v1", "v1"}, []bool{true, true, true})
	leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
	ctx := context.Background()
	// The leader renews every retry period: an edit based on a version it
	// has since renewed is refused (409) and made again on the newest.
	var sent time.Time
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := leases.Get(ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		lease.Spec.HolderIdentity = ptr.To("")
		lease.Spec.LeaseDurationSeconds = ptr.To[int32](1)
		lease.Spec.RenewTime = &now
		if lease.Annotations == nil {
			lease.Annotations = map[string]string{}
		}
		lease.Annotations["leader-elector.io/successor"] = "a-stranger"
		sent = time.Now()
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A read that returns before sent + retryPeriod was served before it:
	// every candidate saw the write no earlier than it was sent.
	for {
		l, err := leases.Get(ctx, g.lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(sent) >= retryPeriod {
			break
		}
		if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "" {
			t.Fatalf("%s took the Lease %v after a release naming a stranger, within the retry period %v", h, time.Since(sent), retryPeriod)
		}
		time.Sleep(20 * time.Millisecond)
	}
	next := g.WaitLeader(successorHandover + 5*time.Second)
	took := time.Since(sent)
	t.Logf("MEASURED release naming a stranger → %s leads: %v", next.name, took.Round(time.Millisecond))
	if took > retryPeriod+successorHandover {
		t.Errorf("took %v, more than a retry period and a handover (%v)", took, retryPeriod+successorHandover)
	}
	if l, err := leases.Get(ctx, g.lease, metav1.GetOptions{}); err == nil {
		if v, ok := l.Annotations["leader-elector.io/successor"]; ok {
			t.Errorf("the new holder's write left the successor annotation %q", v)
		}
	}
}

// TestSuccessorTwoReleasesRacing: two POST /release at once on the leader:
// one releases (naming the successor), the other finds no leader
// ("released": false); the successor leads, under the monitor (no
// overlap, no token going back).
func TestSuccessorTwoReleasesRacing(t *testing.T) {
	g, _ := successorGroup(t, []string{"v1", "v1", "v1"}, []bool{true, true, true})
	leader := g.Members()[0]
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	answers := make([]api.Release, 2)
	for i := range answers {
		wg.Go(func() { answers[i] = leader.release(t) })
	}
	wg.Wait()
	if answers[0].Released == answers[1].Released {
		t.Errorf("released %v and %v by two releases at once, want exactly one", answers[0].Released, answers[1].Released)
	}
	next := g.WaitLeader(retryPeriod+successorHandover, leader)
	if want := namedSuccessor(t, leader); next.name != want {
		t.Errorf("%s leads, want the named successor %q", next.name, want)
	}
	after, err := next.state()
	if err != nil {
		t.Fatal(err)
	}
	if after.FencingToken <= before.FencingToken {
		t.Errorf("fencing token %d after the handover, was %d", after.FencingToken, before.FencingToken)
	}
}

// TestSuccessorHandoverToNewerRevision: a rollout in miniature. Leader and
// follower of revision v1 run with --handover-to-newer-revision; once a
// candidate of v2 is ready, the leader hands over to it (reason
// handed-over) within the configured delay, a probe period (the loop's
// tick) and a handover; the v2 leader does not hand back, nor does
// leadership move again.
func TestSuccessorHandoverToNewerRevision(t *testing.T) {
	const handoverAfter = 2 * time.Second
	lease := leaseName(t)
	createCandidatesLease(t, kubeStore(), lease)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	start := func(i int, rev string) *candidate {
		app := newAppHealth(t, true)
		args := append(app.args(), "--revision="+rev, "--handover-to-newer-revision="+handoverAfter.String())
		c := startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{lease: lease, extraArgs: args})
		g.Add(c)
		return c
	}
	old := start(0, "v1")
	g.WaitLeader(30 * time.Second)
	start(1, "v1")
	waitEntries(t, kubeStore(), g, 1, func(string) bool { return true })
	if s, err := old.state(); err != nil || !s.IsLeader {
		t.Fatalf("%s does not lead before the rollout: %+v %v", old.name, s, err)
	}
	newer := start(2, "v2")
	// Able to take over once its entry says healthy.
	waitEntries(t, kubeStore(), g, 1, func(string) bool { return true })
	ready := time.Now()
	bound := handoverAfter + healthPeriod + successorHandover
	next := g.WaitLeader(bound+leaseDuration, old)
	took := time.Since(ready)
	t.Logf("MEASURED newer revision ready → %s leads: %v (bound %v = %v delay + %v probe period + %v handover)", next.name, took.Round(time.Millisecond), bound, handoverAfter, healthPeriod, successorHandover)
	if next != newer {
		t.Fatalf("%s leads, want %s, the newer revision", next.name, newer.name)
	}
	if took > bound {
		t.Errorf("handed over %v after the newer candidate was ready, more than %v", took, bound)
	}
	if took < handoverAfter-healthPeriod {
		t.Errorf("handed over %v after the newer candidate was ready, before the delay %v", took, handoverAfter)
	}
	if s, err := old.state(); err != nil || s.LastChange == nil || s.LastChange.Reason != "handed-over" {
		t.Errorf("old leader's lastChange %+v (%v), want reason handed-over", s.LastChange, err)
	}
	// Leadership moved once: it stays with the new revision.
	if err := holdsFor(2*handoverAfter+leaseDuration, 100*time.Millisecond, func() error {
		if s, err := newer.state(); err != nil || !s.IsLeader {
			return fmt.Errorf("%s no longer leads: %+v %v", newer.name, s, err)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// auditedGatedGroup starts n health-gated candidates on a control plane of
// the test's own, with an audit log, and waits until one leads and every
// entry of the candidates Lease is healthy and seen by the others.
func auditedGatedGroup(t *testing.T, n int) (*cluster.ControlPlane, string, *group) {
	t.Helper()
	cp, err := cluster.Start(context.Background(), cluster.Options{BinDir: kubeBinDir, WorkDir: t.TempDir(), Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)
	store := leaseStore{name: "audited", client: cp.AdminClient()}
	lease := leaseName(t)
	createCandidatesLease(t, store, lease)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for i := range n {
		app := newAppHealth(t, true)
		g.Add(startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{lease: lease, kubeconfig: cp.AdminKubeconfig(), extraArgs: app.args()}))
	}
	g.WaitLeader(giveUp)
	waitEntries(t, store, g, 1, func(string) bool { return true })
	return cp, lease, g
}

// auditedWrites are the Lease writes (of the election's Lease and of its
// candidates Lease) the audit log received from since to a quarter of a
// retry period after the take: the first successful write of the
// election's Lease sent at or after its acquireTime. That covers the
// release, the take, and client-go's renewal right after the take if it
// were sent: a few milliseconds after it. The new holder's next renewal
// comes a retry period after its take; and the renewal right after a take
// that took half a retry period or more is sent by design (see
// skipsRenewalAfterTaking), but reaches the API server more than a quarter
// of a retry period after the take unless the take's request spent more
// than that on its way.
type auditedWrites struct {
	// lease and candidates count the successful writes of each; afterTake
	// those of the election's Lease after the take; conflicts the writes
	// refused with 409.
	lease, candidates, afterTake, conflicts int
	writes                                  []string
}

func (w auditedWrites) String() string {
	return fmt.Sprintf("%d of the Lease, %d of the candidates Lease, %d refused: %v", w.lease, w.candidates, w.conflicts, w.writes)
}

func countAuditedWrites(t *testing.T, cp *cluster.ControlPlane, lease string, since time.Time) auditedWrites {
	t.Helper()
	isLeaseWrite := func(e cluster.AuditEvent) bool {
		return (e.Verb == "update" || e.Verb == "create") && e.ObjectRef != nil && e.ObjectRef.Resource == "leases" &&
			(e.ObjectRef.Name == lease || e.ObjectRef.Name == lease+"-candidates") && e.ResponseStatus != nil
	}
	l, err := cp.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil || l.Spec.AcquireTime == nil {
		t.Fatalf("read the Lease's acquireTime: %v", err)
	}
	acquired := l.Spec.AcquireTime.Time
	var tookAt time.Time
	// The API server writes an audit event once it has answered, and the
	// take had been answered before the Lease could be read.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		events, err := cp.AuditEvents()
		if err != nil {
			return false, err
		}
		for _, e := range events {
			if isLeaseWrite(e) && e.ObjectRef.Name == lease && e.ResponseStatus.Code == 200 && !e.RequestReceivedTimestamp.Before(acquired) {
				tookAt = e.RequestReceivedTimestamp
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no successful write of the Lease in the audit log after its acquireTime %v: %v", acquired, err)
	}
	until := tookAt.Add(retryPeriod / 4)
	// The window is complete once the log holds the new holder's next
	// renewal (a retry period after its take, so received after until):
	// the writes received before until, a few milliseconds each, were
	// answered and logged long before it.
	var events []cluster.AuditEvent
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, leaseDuration, true, func(context.Context) (bool, error) {
		if events, err = cp.AuditEvents(); err != nil {
			return false, err
		}
		for _, e := range events {
			if isLeaseWrite(e) && e.ObjectRef.Name == lease && e.ResponseStatus.Code == 200 && e.RequestReceivedTimestamp.After(until) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no renewal of the Lease in the audit log after %v: %v", until, err)
	}
	var w auditedWrites
	for _, e := range events {
		at := e.RequestReceivedTimestamp
		if !isLeaseWrite(e) || at.Before(since) || at.After(until) {
			continue
		}
		w.writes = append(w.writes, fmt.Sprintf("%s of %s %d after %v", e.Verb, e.ObjectRef.Name, e.ResponseStatus.Code, at.Sub(since).Round(time.Millisecond)))
		switch {
		case e.ResponseStatus.Code == 409:
			w.conflicts++
		case e.ResponseStatus.Code >= 300:
		case e.ObjectRef.Name != lease:
			w.candidates++
		case at.After(tookAt):
			w.afterTake++
			w.lease++
		default:
			w.lease++
		}
	}
	return w
}

// TestTakeoverWritesAudited: with health gating, a graceful handover
// (SIGTERM of the leader) costs the release naming the successor, the
// leader's entry leaving the candidates Lease and the successor's take, and
// a crash takeover the take alone: the candidates rank themselves for the
// term that ended, so one writes first. Neither sends client-go's renewal
// right after the take. Ten candidates on a control plane of the test's
// own, whose audit log counts the writes.
func TestTakeoverWritesAudited(t *testing.T) {
	const (
		candidates = 10
		// A refused write is allowed in each: where two views of the
		// candidates Lease differ, or the first's write came later than
		// its slot (a race build on a loaded machine).
		maxRefused = 1
	)
	cp, lease, g := auditedGatedGroup(t, candidates)

	leader := g.WaitLeader(giveUp)
	terminated := time.Now()
	leader.signal(syscall.SIGTERM)
	next := g.WaitLeader(retryPeriod+successorHandover, leader)
	w := countAuditedWrites(t, cp, lease, terminated)
	t.Logf("MEASURED graceful handover, %d health-gated candidates: %s took over with %s", candidates, next.name, w)
	// The old leader may renew between the SIGTERM and its release.
	if w.lease > 3 || w.lease < 2 || w.candidates > 1 || w.afterTake > 0 || w.conflicts > maxRefused {
		t.Errorf("the handover wrote %s; want the release and the take (and a renewal before the release at most), the old leader's entry leaving, nothing after the take, at most %d refused", w, maxRefused)
	}

	leader = next
	killed := time.Now()
	leader.signal(syscall.SIGKILL)
	next = g.WaitLeader(giveUp, leader)
	seen := time.Now()
	took := seen.Sub(killed)
	// Counted from a retry period after the kill: a renewal the leader sent
	// just before it died may reach the API server after killed, and no
	// take comes before the lease duration less a retry period.
	w = countAuditedWrites(t, cp, lease, killed.Add(retryPeriod))
	t.Logf("MEASURED crash takeover, %d health-gated candidates: %s took over %v after the kill with %s", candidates, next.name, took.Round(time.Millisecond), w)
	if w.lease != 1 || w.candidates > 0 || w.conflicts > maxRefused {
		t.Errorf("the takeover wrote %s; want the take alone, at most %d refused", w, maxRefused)
	}
	if bound := leaseDuration + racebackoff.Max(retryPeriod) + handoverBound; took > bound {
		t.Errorf("the takeover took %v after the kill, more than %v (lease + the last rank's wait + a handover)", took, bound)
	}
}
