//go:build integration

package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordinationv1ac "k8s.io/client-go/applyconfigurations/coordination/v1"
	"k8s.io/client-go/util/retry"
)

// What `kubectl delete` + `kubectl apply` (or helm uninstall + install, a
// GitOps prune) and `kubectl replace` (or helm upgrade --force) do to the
// shipped Lease, which is `spec: {}`.
var leaseOperations = map[string]func(t *testing.T, name string){
	"delete and re-create": func(t *testing.T, name string) {
		t.Helper()
		leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
		if err := leases.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		// Applied as `kubectl apply --server-side` does: created, or, when
		// a running sidecar has already re-created the missing Lease (it
		// sees the deletion through its watch and may win the race with
		// this call), patched with the manifest, which sets nothing.
		shipped := coordinationv1ac.Lease(name, "default").WithSpec(coordinationv1ac.LeaseSpec())
		if _, err := leases.Apply(context.Background(), shipped, metav1.ApplyOptions{FieldManager: "kubectl", Force: true}); err != nil {
			t.Fatal(err)
		}
	},
	"replace": func(t *testing.T, name string) {
		t.Helper()
		leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
		// As kubectl replace does, with its retry when the leader's renewal
		// comes in between the read and the write.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current, err := leases.Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			replacement := emptyLease(name)
			replacement.ResourceVersion = current.ResourceVersion
			_, err = leases.Update(context.Background(), replacement, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	},
}

func emptyLease(name string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
}

// TestLeaseReplacedWhileRunning: the Lease is deleted and applied again, or
// replaced, while three candidates run and one leads. The monitor checks
// the invariants over the whole run (at most one claimant, tokens never go
// back, as each candidate sees them and across terms); the new term's token
// is above the old one; nobody takes the replaced Lease before a lease
// duration, since the old holder may still claim it.
func TestLeaseReplacedWhileRunning(t *testing.T) {
	t.Parallel()
	for op, apply := range leaseOperations {
		t.Run(op, func(t *testing.T) {
			g := newGroup(t, 3, candidateOptions{})
			leader := g.WaitLeader(giveUp)
			before, err := leader.state()
			if err != nil {
				t.Fatal(err)
			}
			applied := time.Now()
			apply(t, g.lease)
			// The old leader stops claiming as soon as it sees that the
			// Lease no longer names it (at the latest at its renew deadline),
			// and nobody leads the replaced Lease for a lease duration.
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, renewDeadline+e2eSlack, true, func(context.Context) (bool, error) {
				s, err := leader.state()
				return err == nil && !s.IsLeader, nil
			}); err != nil {
				t.Fatalf("%s still leads %v after the %s", leader.name, renewDeadline+e2eSlack, op)
			}
			// Taken a lease duration after the candidates first saw the Lease
			// without history (docs/safety.md), which was before now.
			next := g.WaitLeader(takeoverBound)
			took := time.Since(applied)
			after, err := next.state()
			if err != nil {
				t.Fatal(err)
			}
			if after.FencingToken <= before.FencingToken {
				t.Errorf("fencing token went from %d to %d across the %s", before.FencingToken, after.FencingToken, op)
			}
			// The monitor checks that no claim overlapped the old leader's;
			// the new leader's claim began a lease duration after the
			// candidates saw the replaced Lease, not sooner.
			if after.LeaderSince.IsZero() {
				t.Fatalf("%s leads with no leaderSince: %+v", next.name, after)
			}
			if since := after.LeaderSince.Sub(applied); since < leaseDuration-retryPeriod {
				t.Errorf("%s led %v after the %s: before a lease duration (%v) had passed", next.name, since, op, leaseDuration)
			}
			t.Logf("MEASURED lease %s while running: token %d → %d, new leader %v later", op, before.FencingToken, after.FencingToken, took.Round(time.Millisecond))
		})
	}
}

// TestLeaseReplacedWhileStopped: the same operations while no sidecar runs,
// so no process remembers the old tokens: the sidecars started afterwards
// still begin above every token published before.
func TestLeaseReplacedWhileStopped(t *testing.T) {
	t.Parallel()
	for op, apply := range leaseOperations {
		t.Run(op, func(t *testing.T) {
			g := newGroup(t, 2, candidateOptions{})
			leader := g.WaitLeader(giveUp)
			// A few terms, so that the old Lease's token is above its first.
			for range 3 {
				leader.signal(syscall.SIGTERM)
				if code, err := leader.waitExit(giveUp); err != nil || code != 0 {
					t.Fatalf("%s exit code %d, %v", leader.name, code, err)
				}
				g.Add(startCandidate(t, leader.name+"r", candidateOptions{lease: g.lease}))
				leader = g.WaitLeader(giveUp, leader)
			}
			before, err := leader.state()
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range g.Members() {
				if c.running() {
					c.signal(syscall.SIGKILL)
					c.waitExit(giveUp)
				}
			}
			apply(t, g.lease)
			for i := range 2 {
				g.Add(startCandidate(t, leader.name+"-new-"+string(rune('a'+i)), candidateOptions{lease: g.lease}))
			}
			// Taken a lease duration after the candidates first saw the Lease
			// without history (docs/safety.md), which was before now.
			next := g.WaitLeader(takeoverBound)
			after, err := next.state()
			if err != nil {
				t.Fatal(err)
			}
			if after.FencingToken <= before.FencingToken {
				t.Errorf("fencing token went from %d to %d across the %s while no sidecar ran", before.FencingToken, after.FencingToken, op)
			}
			t.Logf("MEASURED lease %s while stopped: token %d → %d", op, before.FencingToken, after.FencingToken)
		})
	}
}

// TestLeaseDeletedWhileRunning: the Lease is deleted and not applied again
// while candidates run with the right to create it: none leads until it is
// back, the first recreates it without a holder, and the next term's token
// is above the old one.
func TestLeaseDeletedWhileRunning(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 2, candidateOptions{})
	leader := g.WaitLeader(giveUp)
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
	if err := leases.Delete(context.Background(), g.lease, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader's Event goes to the deleted Lease object: the log says it.
	waitChangeLogged(t, leader, "Stopped leading", "lease-deleted")
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*leaseDuration, true, func(ctx context.Context) (bool, error) {
		l, err := leases.Get(ctx, g.lease, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
			t.Errorf("the Lease came back with holder %q: a deleted Lease must come back without one", *l.Spec.HolderIdentity)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the Lease was not created again: %v", err)
	}
	// Taken a lease duration after the candidates first saw the Lease
	// without history (docs/safety.md), which was before now.
	next := g.WaitLeader(takeoverBound)
	after, err := next.state()
	if err != nil {
		t.Fatal(err)
	}
	if after.FencingToken <= before.FencingToken {
		t.Errorf("fencing token went from %d to %d across the deletion", before.FencingToken, after.FencingToken)
	}
}
