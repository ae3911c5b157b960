//go:build integration

package node_test

import (
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// rollouts is how many rolling updates each routing mode goes through.
const rollouts = 5

// maxRolloutGap is the longest a rolling update may leave the Service
// without a ready endpoint after the old leader handed over: a standby
// acquires on the watch event of the release (no retry period), then the
// new leader's routing write and, in label mode, the EndpointSlice
// controller's — API round trips, which nodeSlack absorbs; the new pod is
// already Ready as a candidate. The time before, from the old pod's
// deletion (when the controller drops it) to the kubelet's SIGTERM that
// makes its app hand over, is the kubelet's; it is measured and reported,
// not bounded.
const maxRolloutGap = nodeSlack

// The routing modes (--route=endpointslice|label): every pod is Ready as a
// candidate, the leader publishes itself, so rolling updates, PDBs and
// `kubectl rollout status` work while traffic still goes to the leader
// alone.
func TestRouteEndpointSlice(t *testing.T) {
	runRoutedChecks(t, deployExample(t, "example-endpointslice"))
}

func TestRouteLabel(t *testing.T) { runRoutedChecks(t, deployExample(t, "example-label")) }

func runRoutedChecks(t *testing.T, d *deployment) {
	if !d.routed() {
		t.Fatalf("%s does not run the sidecar in a routing mode", d.name)
	}
	runSteps(t, d, []step{
		{"OneLeaderServes", checkDeployed},
		{"LeastPrivilege", checkLeastPrivilege},
		{"DeleteLeaderPod", checkDeleteLeader},
		{"RollingUpdates", checkRollingUpdates},
		{"FrozenSidecarFenced", checkFrozenSidecar},
	})
}

// checkRollingUpdates restarts the Deployment several times with its
// shipped strategy (maxSurge 1, maxUnavailable 0): each rollout completes as
// `kubectl rollout status` judges it (every replica updated and available),
// a new pod leads and serves, and once the old leader has handed over the
// Service is without a ready endpoint for less than maxRolloutGap.
func checkRollingUpdates(t *testing.T, d *deployment) {
	var gaps, handoverGaps, answerGaps, durations []time.Duration
	for i := range rollouts {
		old := d.servingLeader(t).Name
		// One pod at a time: leadership may move to a surviving old pod
		// first, then to a new one.
		leader, took, r := d.rollOut(t, false, 2)
		gaps, handoverGaps = append(gaps, r.endpointGap()), append(handoverGaps, r.handoverGap())
		answerGaps, durations = append(answerGaps, r.answerGap()), append(durations, took)
		if handoverGaps[i] >= maxRolloutGap {
			t.Errorf("rollout %d: after the old leader handed over, the Service had no ready endpoint for %v, want < %v:\n%s", i+1, handoverGaps[i], maxRolloutGap, r)
		}
		t.Logf("rollout %d: %s → %s in %v; no ready endpoint for %v, %v of it after the handover; longest gap between answers %v",
			i+1, old, leader, took.Round(time.Millisecond), gaps[i].Round(time.Millisecond), handoverGaps[i].Round(time.Millisecond), answerGaps[i].Round(time.Millisecond))
	}
	t.Logf("MEASURED %s: rolling update ×%d (rollout status complete): duration %s; time with no ready endpoint %s, after the handover %s; longest gap between answers %s",
		d.name, rollouts, summary(durations), summary(gaps), summary(handoverGaps), summary(answerGaps))
}

// checkFrozenSidecar freezes the leader's sidecar alone (its app runs on, as
// in a partition that cuts the sidecar off): another pod takes the Lease at
// expiry and publishes itself; resumed, the old sidecar must not publish
// itself again — the Service never lists two pods, the EndpointSlice's
// fencing token never goes back (the observer checks), and the old pod never
// answers after the takeover.
func checkFrozenSidecar(t *testing.T, d *deployment) {
	pod := d.faultReadyLeader(t)
	old := pod.Name
	id := containerID(t, pod, packaging.SidecarName)
	term := d.term(t)
	o := d.observe(t)
	frozen := time.Now()
	if err := theNode.FreezeContainer(string(pod.UID), id); err != nil {
		t.Fatal(err)
	}
	thawed := false
	defer func() {
		if !thawed {
			_ = theNode.ThawContainer(string(pod.UID), id)
		}
	}()
	d.waitNewTerm(t, term)
	leader := d.waitSettled(t, d.settleTimeout())
	d.waitServed(t, leader, old)
	tookOver := time.Now()
	if leader == old {
		t.Fatalf("the pod with the frozen sidecar, %s, leads", old)
	}
	if err := theNode.ThawContainer(string(pod.UID), id); err != nil {
		t.Fatal(err)
	}
	thawed = true
	// Time for the resumed sidecar to act on what it believed before: its
	// pending writes, a retry period, a few probe periods.
	time.Sleep(5 * time.Second)
	after := d.waitSettled(t, d.settleTimeout())
	r := o.stop(t, 1)
	if after != leader {
		t.Errorf("after the thaw %s leads, want %s", after, leader)
	}
	for _, a := range r.answers {
		if a.at.After(tookOver) && a.pod == old {
			t.Errorf("the pod with the stale sidecar, %s, answered the Service at %s, after %s took over", old, a.at.Format("15:04:05.000"), leader)
			break
		}
	}
	d.checkTakeoverAtExpiry(t, r, frozen)
	t.Logf("MEASURED %s: leader's sidecar frozen → %s leads and serves after %v; no ready endpoint for %v; highest EndpointSlice token seen %d",
		d.name, leader, since2(frozen, tookOver), r.endpointGap().Round(time.Millisecond), o.sliceToken)
}

// TestChartRoutes installs the chart's demo in each routing mode, as a user
// would choose it (routing.mode, election.readiness=candidate): one leader
// serves, the leader pod's deletion and rolling updates move traffic within
// the same bounds as the kustomize overlays.
func TestChartRoutes(t *testing.T) {
	for _, mode := range []string{"endpointslice", "label"} {
		t.Run(mode, func(t *testing.T) {
			d := deployChart(t, "routing.mode="+mode, "election.readiness=candidate")
			if d.route != mode {
				t.Fatalf("the chart's sidecar runs with --route=%s, want %s", d.route, mode)
			}
			runSteps(t, d, []step{
				{"OneLeaderServes", checkDeployed},
				{"DeleteLeaderPod", checkDeleteLeader},
				{"RollingUpdates", checkRollingUpdates},
			})
		})
	}
}
