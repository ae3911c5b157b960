//go:build integration

package node_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/node"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// deleteRepetitions is how often the leader pod is deleted per deployment.
const deleteRepetitions = 5

// settleTimeout bounds a wait for one settled, serving leader: a lease
// duration plus pod start, probe period and kube-proxy sync, with room for
// this 2-core machine.
func (d *deployment) settleTimeout() time.Duration { return d.leaseDur + 45*time.Second }

// TestExample and TestChart run the same checks on what each ships.
func TestExample(t *testing.T) { runChecks(t, deployExample(t, "example")) }
func TestChart(t *testing.T)   { runChecks(t, deployChart(t)) }

func runChecks(t *testing.T, d *deployment) {
	runSteps(t, d, []step{
		{"OneReadyLeaderServes", checkDeployed},
		{"LeastPrivilege", checkLeastPrivilege},
		{"DeleteLeaderPod", checkDeleteLeader},
		{"KillSidecar", checkKillSidecar},
		{"FreezeLeaderPod", checkFreezePod},
		{"RolloutRestart", checkRollout},
	})
}

// step is one check of a deployment, run as a subtest.
type step struct {
	name string
	run  func(*testing.T, *deployment)
}

// runSteps runs the steps in order and stops at the first that fails:
// later steps assume a healthy deployment.
func runSteps(t *testing.T, d *deployment, steps []step) {
	for _, s := range steps {
		if !t.Run(s.name, func(t *testing.T) { s.run(t, d) }) {
			t.FailNow()
		}
	}
}

// servingLeader waits for a settled leader that answers the Service and
// returns its pod.
func (d *deployment) servingLeader(t *testing.T) *corev1.Pod {
	t.Helper()
	leader := d.waitSettled(t, d.settleTimeout())
	d.waitServed(t, leader)
	pod, err := d.client.CoreV1().Pods(d.namespace).Get(context.Background(), leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// faultReadyLeader is servingLeader for the fault tests (SIGKILL, freeze):
// it also waits until every pod's sidecar has run for a while, so that each
// candidate has seen the leader's renewals. A candidate measures the
// holder's lease from when it last saw the Lease change, on its own clock
// (it cannot trust another node's timestamps), so one that started after the
// last renewal would take over only a lease duration after its start — the
// promised behaviour, but not the takeover at expiry these tests measure.
// Pod deletions just before leave such fresh replacements behind.
func (d *deployment) faultReadyLeader(t *testing.T) *corev1.Pod {
	t.Helper()
	d.waitPods(t, 200*time.Millisecond, func(dep *appsv1.Deployment, pods []corev1.Pod) (bool, string) {
		// StartedAt has whole seconds: 3 s before now is at least 2 s of
		// running, many watch round trips.
		watching := 0
		for _, p := range pods {
			for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
				if p.DeletionTimestamp == nil && cs.Name == packaging.SidecarName && cs.State.Running != nil &&
					time.Since(cs.State.Running.StartedAt.Time) >= 3*time.Second {
					watching++
				}
			}
		}
		return watching == len(pods) && watching == int(*dep.Spec.Replicas),
			fmt.Sprintf("%d of %d pods have had their sidecar running for 3 s", watching, len(pods))
	})
	return d.servingLeader(t)
}

// waitPods polls the Deployment and its pods every interval until done
// reports true, and fails the test with done's description of the state if
// that takes longer than the settle timeout.
func (d *deployment) waitPods(t *testing.T, interval time.Duration, done func(*appsv1.Deployment, []corev1.Pod) (bool, string)) {
	t.Helper()
	d.waitPodsFor(t, interval, d.settleTimeout(), done)
}

// waitPodsFor is waitPods with its own timeout.
func (d *deployment) waitPodsFor(t *testing.T, interval, timeout time.Duration, done func(*appsv1.Deployment, []corev1.Pod) (bool, string)) {
	t.Helper()
	var state string
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		dep, err := d.client.AppsV1().Deployments(d.namespace).Get(ctx, d.deployment, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pods, err := d.pods(ctx)
		if err != nil {
			return false, err
		}
		var ok bool
		ok, state = done(dep, pods)
		return ok, nil
	})
	if err != nil {
		t.Fatalf("not done after %v: %s (%v)", timeout, state, err)
	}
}

// checkDeployed: exactly one pod is Ready, the EndpointSlices list exactly
// that pod as ready, every request to the ClusterIP is answered by it, and
// its app sees isLeader: true on localhost:4040/leader.
func checkDeployed(t *testing.T, d *deployment) {
	ctx := context.Background()
	began := time.Now()
	leader := d.waitSettled(t, d.settleTimeout())
	d.waitServed(t, leader)
	t.Logf("MEASURED %s: settled and serving %v after the check began", d.name, since(began))
	// The demo app asks localhost:4040/leader every 5 s and logs the answer.
	var log string
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, nodeGiveUp, true, func(ctx context.Context) (bool, error) {
		log = d.logs(ctx, leader, "app", 5)
		return strings.Contains(log, `"identity":"`+leader+`"`) && strings.Contains(log, `"isLeader":true`), nil
	}); err != nil {
		t.Fatalf("the leader's app never logged isLeader: true from localhost:4040/leader; its log:\n%s", log)
	}
	pods, err := d.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Name != leader && strings.Contains(d.logs(ctx, p.Name, "app", 5), `"isLeader":true`) {
			t.Errorf("follower %s's app was told it leads", p.Name)
		}
	}
}

// waitServed waits until 10 requests in a row to the ClusterIP are answered
// by pod. Until pod has answered once, answers from the previous leaders are
// tolerated: kube-proxy follows the EndpointSlice a moment after the API
// does, and in the routing modes the old app still serves while it hands
// over (on SIGTERM, before it stops). Once pod has answered, any other answer fails the test
// (the observer also fails a switch back).
func (d *deployment) waitServed(t *testing.T, pod string, previous ...string) {
	t.Helper()
	ctx := context.Background()
	url, err := d.serviceURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	inARow := 0
	answered := false
	var last string
	var lastErr error
	// Ten answers in a row are asked back to back; after any other answer,
	// the next try waits 50 ms.
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, nodeGiveUp, true, func(ctx context.Context) (bool, error) {
		for inARow < 10 {
			got, err := ask(ctx, url)
			switch {
			case err == nil && got == pod:
				inARow++
				answered = true
				continue
			case err == nil && (answered || !slices.Contains(previous, got)):
				return false, fmt.Errorf("the Service was answered by %s, not the leader %s", got, pod)
			}
			inARow, last, lastErr = 0, got, err
			return false, nil
		}
		return true, nil
	})
	switch {
	case wait.Interrupted(err):
		t.Fatalf("the Service never answered from the leader %s: last answer %q, %v", pod, last, lastErr)
	case err != nil:
		t.Fatal(err)
	}
}

// checkLeastPrivilege: the sidecar runs as uid/gid 65532 with a read-only
// root filesystem, the app has no ServiceAccount token, and every request
// on the Lease was made with the ServiceAccount's token under the shipped
// Role (the audit log names the user).
func checkLeastPrivilege(t *testing.T, d *deployment) {
	ctx := context.Background()
	pod := d.servingLeader(t)
	for _, name := range []string{packaging.SidecarName, "app"} {
		pid, err := theNode.ContainerPID(ctx, containerID(t, pod, name))
		if err != nil {
			t.Fatal(err)
		}
		uid, gid, ro, err := node.ProcessIdentity(pid)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s (pid %d): uid %s, gid %s, read-only root %v", name, pid, uid, gid, ro)
		if uid != "65532 65532 65532 65532" || gid != "65532 65532 65532 65532" {
			t.Errorf("%s runs as uid %q gid %q, want 65532", name, uid, gid)
		}
		token := fmt.Sprintf("/proc/%d/root%s/token", pid, packaging.TokenMountPath)
		_, statErr := os.Stat(token)
		switch name {
		case packaging.SidecarName:
			if !ro {
				t.Errorf("the sidecar's root filesystem is writable")
			}
			if statErr != nil {
				t.Errorf("the sidecar has no ServiceAccount token: %v", statErr)
			}
		case "app":
			if statErr == nil {
				t.Errorf("the app container can read a ServiceAccount token at %s", packaging.TokenMountPath)
			}
		}
	}
	wantUser := "system:serviceaccount:" + d.namespace + ":" + pod.Spec.ServiceAccountName
	events, err := theNode.ControlPlane().AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var writes int
	for _, ev := range events {
		if ev.ObjectRef == nil || ev.ObjectRef.Resource != "leases" || ev.ObjectRef.Namespace != d.namespace || ev.ObjectRef.Name != d.lease {
			continue
		}
		if slices.Contains(ev.User.Groups, "system:masters") {
			continue // the test itself: it applied the Lease and watches it
		}
		if ev.User.Username != wantUser {
			t.Errorf("%s on the Lease by %q, want only %q", ev.Verb, ev.User.Username, wantUser)
		}
		if ev.Verb == "update" && ev.ResponseStatus != nil && ev.ResponseStatus.Code == http.StatusOK {
			writes++
		}
	}
	if writes == 0 {
		t.Errorf("no successful update of the Lease by %s in the audit log", wantUser)
	}
	t.Logf("%d successful Lease updates, all by %s", writes, wantUser)
}

// checkDeleteLeader deletes the leader pod (kubectl delete pod, default
// grace) several times: the sidecar releases the Lease, another pod leads
// and is Ready, the Service answers from it. The first time it also shows
// the native sidecar ordering: the app stops before the Lease is released.
func checkDeleteLeader(t *testing.T, d *deployment) {
	ctx := context.Background()
	var gaps, answerGaps, handovers []time.Duration
	var wantEvents []string
	for i := range deleteRepetitions {
		pod := d.servingLeader(t)
		old := pod.Name
		oldTerm := d.term(t)
		o := d.observe(t)
		var order *stopOrder
		if i == 0 {
			order = watchStopOrder(pod.Status.PodIP)
		}
		deleted := time.Now()
		if err := d.client.CoreV1().Pods(d.namespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		leader := d.waitSettledExcept(t, d.settleTimeout(), old)
		d.waitServed(t, leader, old)
		r := o.stop(t, 1)
		if leader == old {
			t.Fatalf("the deleted pod %s still leads", old)
		}
		released, ok := r.firstLeaseAfter(deleted, func(l leaseAt) bool { return l.holder != old })
		if !ok {
			t.Fatalf("the Lease never left %s:\n%s", old, r)
		}
		if released.at.Sub(deleted) >= d.leaseDur {
			t.Errorf("the Lease left %s only %v after the deletion: it expired instead of being released", old, released.at.Sub(deleted))
		}
		// In the routing modes the demo app hands leadership over on
		// SIGTERM (POST /release) before its sidecar is stopped.
		stopReason := "shutdown"
		if d.routed() {
			stopReason = "released"
		}
		wantEvents = append(wantEvents,
			fmt.Sprintf("%s stopped leading (reason %s, fencing token %d)", old, stopReason, oldTerm),
			fmt.Sprintf("%s became leader (reason acquired, fencing token %d)", leader, d.term(t)))
		gaps, answerGaps = append(gaps, r.endpointGap()), append(answerGaps, r.answerGap())
		handovers = append(handovers, released.at.Sub(deleted))
		if order != nil {
			order.check(t, released, d.routed())
		}
		t.Logf("delete %d: %s → %s; Lease left the old pod %v after the delete; no ready endpoint for %v; longest gap between answers %v",
			i+1, old, leader, since2(deleted, released.at), gaps[i].Round(time.Millisecond), answerGaps[i].Round(time.Millisecond))
	}
	t.Logf("MEASURED %s: delete leader pod ×%d: time with no ready endpoint %s; longest gap between answers %s; delete → Lease released %s",
		d.name, deleteRepetitions, summary(gaps), summary(answerGaps), summary(handovers))
	d.checkLeaseEvents(t, wantEvents)
}

// checkLeaseEvents: every handover left its Events on the Lease, recorded
// by the sidecars with the shipped RBAC, as `kubectl describe lease` finds
// them (by the Lease's kind, name and UID) — the deleted leader's "stopped
// leading" too, written before its sidecar exited.
func (d *deployment) checkLeaseEvents(t *testing.T, want []string) {
	t.Helper()
	ctx := context.Background()
	lease, err := d.client.CoordinationV1().Leases(d.namespace).Get(ctx, d.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	selector := fields.Set{"involvedObject.kind": "Lease", "involvedObject.name": d.lease, "involvedObject.uid": string(lease.UID)}.String()
	var got, missing []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, nodeGiveUp, true, func(ctx context.Context) (bool, error) {
		list, err := d.client.CoreV1().Events(d.namespace).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, err
		}
		got = got[:0]
		for _, e := range list.Items {
			if e.Reason == "LeaderElection" && e.Source.Component == "leader-elector" {
				got = append(got, e.Message)
			}
		}
		missing = slices.DeleteFunc(slices.Clone(want), func(m string) bool { return slices.Contains(got, m) })
		return len(missing) == 0, nil
	})
	switch {
	case wait.Interrupted(err):
		slices.Sort(got)
		t.Errorf("Events on the Lease lack %q; they are:\n  %s", missing, strings.Join(got, "\n  "))
	case err != nil:
		t.Fatal(err)
	default:
		t.Logf("%d LeaderElection Events on the Lease, every handover's among them", len(got))
	}
}

// stopOrder polls the old leader pod's app (:8081) and sidecar probe port
// (:8080) directly, to see which stops first.
type stopOrder struct {
	done                     chan struct{}
	appStopped               time.Time
	appLastOK, sidecarLastOK time.Time
}

func watchStopOrder(podIP string) *stopOrder {
	s := &stopOrder{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		deadline := time.Now().Add(60 * time.Second)
		var app, sidecar stopDetector
		for (!app.stopped || !sidecar.stopped) && time.Now().Before(deadline) {
			if !app.stopped {
				_, err := ask(context.Background(), "http://"+podIP+":8081/")
				app.observe(err)
			}
			if !sidecar.stopped {
				resp, err := httpClient.Get("http://" + podIP + ":8080/healthz")
				if err == nil {
					resp.Body.Close()
				}
				sidecar.observe(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.appLastOK, s.sidecarLastOK = app.lastOK, sidecar.lastOK
		if app.stopped {
			s.appStopped = app.since
		}
	}()
	return s
}

// stopDetector decides from the answers to a poll when a server stopped.
// One failed request is not a stop: on the loaded node a request can time
// out (the client waits 1 s) while the server still runs — a run once took
// the sidecar for stopped 0.7 s before the app, while the kubelet's probes
// show its port refused only after the app had gone. A refused connection
// (the listener is closed) is a stop at once; otherwise it takes
// stopAfterFailures failures in a row, and the stop is dated from the
// first of them.
type stopDetector struct {
	lastOK, since time.Time
	failures      int
	stopped       bool
}

const stopAfterFailures = 3

func (d *stopDetector) observe(err error) {
	now := time.Now()
	if err == nil {
		d.lastOK, d.failures, d.since = now, 0, time.Time{}
		return
	}
	if d.failures == 0 {
		d.since = now
	}
	d.failures++
	d.stopped = errors.Is(err, syscall.ECONNREFUSED) || d.failures >= stopAfterFailures
}

// check: the sidecar still answered after the app had stopped, and the
// Lease was released after the app stopped — or, in the routing modes,
// before: their apps hand leadership over on SIGTERM (POST /release) before
// they stop, so that the new leader's routing write moves the traffic while
// the old app still serves.
//
// In readiness mode the release is taken as the watch saw it (no earlier
// than it happened). In the routing modes it is the renewTime the sidecar
// stamped on the releasing write — the same node clock, and no later than
// the write, which completes before the app stops — since the watch may
// deliver it after the app, stopped a few milliseconds later, is gone.
func (s *stopOrder) check(t *testing.T, released leaseAt, routed bool) {
	t.Helper()
	<-s.done
	if s.appStopped.IsZero() {
		t.Fatal("the deleted pod's app never stopped answering")
	}
	t.Logf("MEASURED native sidecar order: app stopped at %s (last answer %s), sidecar last answered at %s, Lease released at %s (written), seen at %s",
		s.appStopped.Format("15:04:05.000"), s.appLastOK.Format("15:04:05.000"), s.sidecarLastOK.Format("15:04:05.000"),
		released.renw.Format("15:04:05.000"), released.at.Format("15:04:05.000"))
	switch {
	case !routed && !s.appStopped.Before(released.at):
		t.Errorf("the Lease was released (seen %s) before the app stopped (%s)", released.at.Format("15:04:05.000"), s.appStopped.Format("15:04:05.000"))
	case routed && released.holder != "":
		t.Errorf("the Lease went to %s without a release: the app did not hand over on SIGTERM", released.holder)
	case routed && !released.renw.Before(s.appStopped):
		t.Errorf("the app stopped (%s) before it had the Lease released (%s)", s.appStopped.Format("15:04:05.000"), released.renw.Format("15:04:05.000"))
	}
	if !s.sidecarLastOK.After(s.appLastOK) {
		t.Errorf("the sidecar stopped answering (%s) before the app (%s)", s.sidecarLastOK.Format("15:04:05.000"), s.appLastOK.Format("15:04:05.000"))
	}
}

// checkKillSidecar SIGKILLs the leader's sidecar process from the node:
// the pod turns unready at once, nobody takes the Lease before it expires,
// a leader is back (the restarted sidecar or the other pod) at expiry, and
// the Service never routes to two pods.
func checkKillSidecar(t *testing.T, d *deployment) {
	ctx := context.Background()
	pod := d.faultReadyLeader(t)
	old := pod.Name
	term := d.term(t)
	o := d.observe(t)
	killed := time.Now()
	pid, err := theNode.KillContainer(ctx, containerID(t, pod, packaging.SidecarName))
	if err != nil {
		t.Fatal(err)
	}
	d.waitNewTerm(t, term)
	leader := d.waitSettled(t, d.settleTimeout())
	d.waitServed(t, leader, old)
	settled := time.Now()
	r := o.stop(t, 1)
	d.checkTakeoverAtExpiry(t, r, killed)
	t.Logf("MEASURED %s: SIGKILL of the leader's sidecar (pid %d in %s) → %s leads and serves after %v; no ready endpoint for %v",
		d.name, pid, old, leader, since2(killed, settled), r.endpointGap().Round(time.Millisecond))
}

// checkTakeoverAtExpiry: the first new term after start began no earlier
// than the old holder's last renewal + the lease duration, and not much
// later (a retry period and the time to observe it).
func (d *deployment) checkTakeoverAtExpiry(t *testing.T, r observation, start time.Time) {
	t.Helper()
	var term int32
	for _, l := range r.leases {
		if l.at.Before(start) {
			term = l.transitions
		}
	}
	next, ok := r.firstLeaseAfter(start, func(l leaseAt) bool { return l.transitions > term })
	if !ok {
		t.Fatalf("no new term after %s:\n%s", start.Format("15:04:05.000"), r)
	}
	// The old term's last renewal: a renewal sent just before the fault
	// may reach the watch after it.
	var lastRenew time.Time
	for _, l := range r.leases {
		if l.transitions == term && l.renw.After(lastRenew) {
			lastRenew = l.renw
		}
	}
	wait := next.acquire.Sub(lastRenew)
	t.Logf("MEASURED %s: last renewal %s, new term %d acquired %s by %s: %v after the renewal (lease duration %v)",
		d.name, lastRenew.Format("15:04:05.000"), next.transitions, next.acquire.Format("15:04:05.000"), next.holder, wait.Round(time.Millisecond), d.leaseDur)
	if wait < d.leaseDur {
		t.Errorf("the Lease was taken %v after the last renewal, before it expired (%v)", wait, d.leaseDur)
	}
	// The sidecar tries at expiry (measured: 15.01 s with a 15 s lease);
	// the bound leaves a loaded machine a retry period (client-go's next
	// attempt, should the one at expiry fail) and nodeSlack.
	if limit := d.leaseDur + d.retry + nodeSlack; wait > limit {
		t.Errorf("the Lease was taken %v after the last renewal, later than %v", wait, limit)
	}
}

// checkFreezePod freezes every process of the leader pod (cgroup freezer):
// the pod turns unready, the other pod takes the Lease at expiry and serves;
// thawed, the old pod stands by and never serves again.
func checkFreezePod(t *testing.T, d *deployment) {
	pod := d.faultReadyLeader(t)
	old := pod.Name
	term := d.term(t)
	o := d.observe(t)
	frozen := time.Now()
	if err := theNode.FreezePod(string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = theNode.ThawPod(string(pod.UID))
		}
	}()
	d.waitNewTerm(t, term)
	leader := d.waitSettled(t, d.settleTimeout())
	d.waitServed(t, leader, old)
	settled := time.Now()
	if leader == old {
		t.Fatalf("the frozen pod %s leads", old)
	}
	if err := theNode.ThawPod(string(pod.UID)); err != nil {
		t.Fatal(err)
	}
	thawed = true
	thawedAt := time.Now()
	// Give the thawed sidecar time to act on what it believed: a few probe
	// periods and a retry period.
	time.Sleep(5 * time.Second)
	after := d.waitSettled(t, d.settleTimeout())
	r := o.stop(t, 1)
	if after != leader {
		t.Errorf("after the thaw %s leads, want %s (who took over)", after, leader)
	}
	for _, a := range r.answers {
		if a.at.After(thawedAt) && a.pod == old {
			t.Errorf("the thawed pod %s answered the Service at %s", old, a.at.Format("15:04:05.000"))
			break
		}
	}
	d.checkTakeoverAtExpiry(t, r, frozen)
	t.Logf("MEASURED %s: frozen leader %s → %s leads and serves after %v; no ready endpoint for %v",
		d.name, old, leader, since2(frozen, settled), r.endpointGap().Round(time.Millisecond))
}

// checkRollout runs `kubectl rollout restart` with the shipped strategy
// (maxSurge 0, maxUnavailable 100%): every pod is replaced without anyone's
// help, a new pod leads and serves. With readiness = leadership only one pod
// is ever available, so `kubectl rollout status` cannot report success: the
// test checks exactly that documented state (all replicas updated, one
// available) and measures the gap with no ready endpoint.
func checkRollout(t *testing.T, d *deployment) {
	d.servingLeader(t)
	// All at once: leadership moves once, to a new pod.
	leader, took, r := d.rollOut(t, true, 1)
	t.Logf("MEASURED %s: rollout restart: all pods replaced, new leader %s serving after %v; no ready endpoint for %v; longest gap between answers %v",
		d.name, leader, took.Round(time.Millisecond), r.endpointGap().Round(time.Millisecond), r.answerGap().Round(time.Millisecond))
}

// rollOut restarts the Deployment (kubectl rollout restart) while observing
// it, waits until the rollout has finished (see waitRolledOut) and a new pod
// leads and serves, and returns that pod, the time it took and what was
// observed (the answering pod may change at most maxSwitches times).
func (d *deployment) rollOut(t *testing.T, onlyLeaderAvailable bool, maxSwitches int) (string, time.Duration, observation) {
	t.Helper()
	before, err := d.pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := d.observe(t)
	began := d.rolloutRestart(t)
	d.waitRolledOut(t, before, onlyLeaderAvailable)
	leader := d.waitSettled(t, d.settleTimeout())
	if slices.Contains(names(before), leader) {
		t.Fatalf("the old pod %s still leads after the rollout", leader)
	}
	d.waitServed(t, leader, names(before)...)
	took := time.Since(began)
	return leader, took, o.stop(t, maxSwitches)
}

// waitRolledOut waits until the rollout that replaces the pods before has
// finished: the Deployment has seen its new generation, every replica is
// updated, only new pods are left, and the available replicas are all of
// them — or, with onlyLeaderAvailable (readiness = leadership), exactly one,
// and never more while it waits. All of them available is the rule
// `kubectl rollout status` applies.
func (d *deployment) waitRolledOut(t *testing.T, before []corev1.Pod, onlyLeaderAvailable bool) {
	t.Helper()
	d.waitPods(t, 100*time.Millisecond, func(dep *appsv1.Deployment, pods []corev1.Pod) (bool, string) {
		old := 0
		for _, p := range pods {
			if slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID }) {
				old++
			}
		}
		want, st := *dep.Spec.Replicas, dep.Status
		wantAvailable := want
		if onlyLeaderAvailable {
			wantAvailable = 1
			if st.AvailableReplicas > 1 {
				t.Errorf("%d replicas available during the rollout, want at most 1 (the leader)", st.AvailableReplicas)
			}
		}
		return st.ObservedGeneration >= dep.Generation && st.UpdatedReplicas == want && st.Replicas == want &&
				st.AvailableReplicas == wantAvailable && old == 0 && len(pods) == int(want),
			fmt.Sprintf("the rollout: updated %d, replicas %d, available %d of %d; %d pods, %d of them old",
				st.UpdatedReplicas, st.Replicas, st.AvailableReplicas, want, len(pods), old)
	})
}

// term is the Lease's current leaseTransitions (the fencing token).
func (d *deployment) term(t *testing.T) int32 {
	t.Helper()
	l, err := d.client.CoordinationV1().Leases(d.namespace).Get(context.Background(), d.lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// waitNewTerm waits until someone holds the Lease in a term after term.
func (d *deployment) waitNewTerm(t *testing.T, term int32) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, d.settleTimeout(), true, func(ctx context.Context) (bool, error) {
		l, err := d.client.CoordinationV1().Leases(d.namespace).Get(ctx, d.lease, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return l.Spec.LeaseTransitions != nil && *l.Spec.LeaseTransitions > term && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatalf("no new term after %d within %v: %v", term, d.settleTimeout(), err)
	}
}

// rolloutRestart does what `kubectl rollout restart` does — stamps the pod
// template with the time — and returns that time.
func (d *deployment) rolloutRestart(t *testing.T) time.Time {
	t.Helper()
	now := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, now.Format(time.RFC3339Nano))
	if _, err := d.client.AppsV1().Deployments(d.namespace).Patch(context.Background(), d.deployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	return now
}

func containerID(t *testing.T, pod *corev1.Pod, name string) string {
	t.Helper()
	for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
		if cs.Name == name && cs.ContainerID != "" {
			return cs.ContainerID
		}
	}
	t.Fatalf("pod %s has no running container %s", pod.Name, name)
	return ""
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

func since2(from, to time.Time) time.Duration { return to.Sub(from).Round(time.Millisecond) }

// summary prints min / median / max of a few durations.
func summary(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return "(none)"
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("min %v / median %v / max %v (n=%d)", r(s[0]), r(s[len(s)/2]), r(s[len(s)-1]), len(s))
}

// TestStopDetector: a timed-out request is not a stop, a refused
// connection is, and so are stopAfterFailures failures in a row, dated from
// the first.
func TestStopDetector(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timeout := fmt.Errorf("Get: %w", context.DeadlineExceeded)

	var d stopDetector
	d.observe(nil)
	d.observe(timeout)
	if d.stopped {
		t.Fatal("one timed-out request counted as a stop")
	}
	d.observe(nil)
	if d.stopped || d.failures != 0 || !d.since.IsZero() {
		t.Fatalf("an answer after a timeout: stopped %v, failures %d, since %v", d.stopped, d.failures, d.since)
	}
	answered := d.lastOK
	d.observe(refused)
	if !d.stopped || d.since.Before(answered) {
		t.Fatalf("a refused connection: stopped %v since %v (last answer %v)", d.stopped, d.since, answered)
	}

	var e stopDetector
	e.observe(timeout)
	first := e.since
	for range stopAfterFailures - 2 {
		e.observe(timeout)
	}
	if e.stopped {
		t.Fatalf("%d failures in a row counted as a stop", stopAfterFailures-1)
	}
	e.observe(timeout)
	if !e.stopped || !e.since.Equal(first) {
		t.Fatalf("%d failures in a row: stopped %v since %v, want since the first, %v", stopAfterFailures, e.stopped, e.since, first)
	}
}
