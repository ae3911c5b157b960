//go:build integration

package node_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// rolloutRuns is how many rolling updates TestRolloutMovesLeadershipOnce
// makes: 2 in the node suite, more with LEADER_ELECTOR_ROLLOUT_RUNS (make
// rollout-proof: 10, and the same without successors, for comparison).
func rolloutRuns(t *testing.T) (runs int, compare bool) {
	t.Helper()
	v := os.Getenv("LEADER_ELECTOR_ROLLOUT_RUNS")
	if v == "" {
		return 2, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 100 {
		t.Fatalf("LEADER_ELECTOR_ROLLOUT_RUNS=%q: want a number of rolling updates, 1 to 100", v)
	}
	return n, true
}

// TestRolloutMovesLeadershipOnce: rolling updates (kubectl rollout restart)
// of the chart's demo, 3 replicas, with successor.enabled, under each
// strategy the chart ships: readiness candidate (maxSurge 1,
// maxUnavailable 0: Kubernetes' default for 3 replicas) and readiness
// leader (its default: maxSurge 0, maxUnavailable 100%, every old pod
// terminated at once). Each rollout moves leadership exactly once, to a
// pod of the new revision: the old leader names a new pod when it
// releases, and an old pod, terminating, never takes the Lease
// (--check-pod-terminating). With make rollout-proof the same rollouts are
// measured without successors too, for the docs' before/after (not
// asserted).
func TestRolloutMovesLeadershipOnce(t *testing.T) {
	runs, compare := rolloutRuns(t)
	for _, readiness := range []string{"candidate", "leader"} {
		t.Run("readiness "+readiness, func(t *testing.T) {
			values := []string{"demo.replicas=3", "election.readiness=" + readiness, "successor.handoverToNewerRevisionSeconds=5"}
			if compare {
				t.Run("without successors", func(t *testing.T) {
					d := deployChart(t, values...)
					d.waitLeads(t)
					moves := d.rolloutMoves(t, runs, readiness == "leader", false)
					t.Logf("MEASURED leadership moves per rolling update without successors (3 replicas, readiness %s): %v", readiness, moves)
				})
			}
			t.Run("with successors", func(t *testing.T) {
				d := deployChart(t, append(values, "successor.enabled=true")...)
				d.waitLeads(t)
				moves := d.rolloutMoves(t, runs, readiness == "leader", true)
				t.Logf("MEASURED leadership moves per rolling update with successors (3 replicas, readiness %s): %v", readiness, moves)
				for i, m := range moves {
					if m != 1 {
						t.Errorf("rolling update %d moved leadership %d times, want exactly once", i+1, m)
					}
				}
			})
		})
	}
}

// waitLeads waits until a pod leads (with readiness candidate every pod is
// a ready endpoint, so waitSettled does not apply).
func (d *deployment) waitLeads(t *testing.T) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, d.settleTimeout(), true, func(ctx context.Context) (bool, error) {
		h, err := d.holder(ctx)
		return err == nil && h != "", nil
	}); err != nil {
		t.Fatalf("no pod leads within %v", d.settleTimeout())
	}
}

// rolloutMoves makes n rolling updates one after another and returns how
// many times each moved leadership: the holders the Lease named, in the
// order its watch showed them, from the rollout's start until every old pod
// is gone and a new one leads. Each rollout must end with a new pod leading.
// With leaderReadiness only the leader is available, and kubectl rollout
// status never succeeds (TestRolloutTools): the rollout is waited for as
// the routing tests do.
// With oldIsAnError a holder of the old revision fails the test.
func (d *deployment) rolloutMoves(t *testing.T, n int, leaderReadiness, oldIsAnError bool) []int {
	t.Helper()
	w := d.watchHolders(t)
	var moves []int
	for i := range n {
		before, err := d.pods(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		old := names(before)
		from := w.mark()
		began := d.rolloutRestart(t)
		if leaderReadiness {
			d.waitRolledOut(t, before, true)
		} else if out, err := d.rolloutStatus(t, 3*time.Minute); err != nil || !strings.Contains(out, "successfully rolled out") {
			t.Fatalf("rolling update %d: kubectl rollout status: %v\n%s", i+1, err, out)
		}
		// The last old pod may release while it terminates, after rollout
		// status returned: wait until every old pod is gone.
		err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, d.settleTimeout(), true, func(ctx context.Context) (bool, error) {
			pods, err := d.pods(ctx)
			if err != nil {
				return false, nil
			}
			h, err := d.holder(ctx)
			return err == nil && h != "" && !slices.Contains(old, h) && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return slices.Contains(old, p.Name) }), nil
		})
		if err != nil {
			t.Fatalf("rolling update %d: no new pod leads, or old pods remain, %v after it began", i+1, since(began))
		}
		holders := w.since(from)
		moves = append(moves, len(holders))
		for _, h := range holders {
			if oldIsAnError && slices.Contains(old, h) {
				t.Errorf("rolling update %d: leadership went to %s, a pod of the old revision (holders in order: %v)", i+1, h, holders)
			}
		}
		t.Logf("rolling update %d: %v; holders after the old leader: %v", i+1, since(began), holders)
	}
	return moves
}

// holderWatch records every holder the Lease names, in order, from a watch
// (a poll could miss a term that lasted less than its interval).
type holderWatch struct {
	mu      sync.Mutex
	holders []string
}

// mark is the position to count new holders from.
func (w *holderWatch) mark() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.holders)
}

// since lists the holders that took the Lease after mark.
func (w *holderWatch) since(mark int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.holders[mark:])
}

// watchHolders watches d's Lease until the test ends.
func (d *deployment) watchHolders(t *testing.T) *holderWatch {
	t.Helper()
	w := &holderWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	seen := func(obj any) {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if h := *l.Spec.HolderIdentity; len(w.holders) == 0 || w.holders[len(w.holders)-1] != h {
			w.holders = append(w.holders, h)
		}
	}
	_, informer := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: d.leaseListWatch(),
		ObjectType:    &coordinationv1.Lease{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    seen,
			UpdateFunc: func(_, obj any) { seen(obj) },
		},
	})
	done := make(chan struct{})
	go func() { defer close(done); informer.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the Lease watch did not sync")
	}
	return w
}
