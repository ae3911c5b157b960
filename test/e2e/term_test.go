//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/partition"
)

// TestPartitionsStaleTermCheckpointAndRelease: one member owns every
// partition; it releases partition p (term T1) and takes it back after its
// sit-out (term T2), and stores a checkpoint in T2. A worker left over from
// T1 then checkpoints and releases with its token: both are answered 409
// term-changed, the Lease keeps T2's checkpoint and T2 goes on. In T2's own
// name both go through.
func TestPartitionsStaleTermCheckpointAndRelease(t *testing.T) {
	t.Parallel()
	g := newPartitionGroup(t, candidateOptions{})
	a := g.join(1)[0]
	g.waitFair("one member", time.Now())
	ctx := context.Background()
	s, err := a.partitions()
	if err != nil {
		t.Fatal(err)
	}
	p, t1 := s.Owned[0].Partition, s.Owned[0].FencingToken
	if _, err := a.api().CheckpointTerm(ctx, p, t1, "offset=1000"); err != nil {
		t.Fatalf("T1's checkpoint: %v", err)
	}
	if _, err := a.api().ReleasePartitionTerm(ctx, p, t1); err != nil {
		t.Fatalf("releasing partition %d in T1 (%d): %v", p, t1, err)
	}
	var t2 int64
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*leaseDuration, true, func(context.Context) (bool, error) {
		s, err := a.partitions()
		if err != nil {
			return false, nil
		}
		for _, o := range s.Owned {
			if o.Partition == p && o.FencingToken > t1 {
				t2 = o.FencingToken
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%s did not take partition %d back in a new term: %v\n%s", a.name, p, err, a.log())
	}
	if _, err := a.api().CheckpointTerm(ctx, p, t2, "offset=2000"); err != nil {
		t.Fatalf("T2's checkpoint: %v", err)
	}

	var apiErr *api.Error
	_, err = a.api().CheckpointTerm(ctx, p, t1, "offset=1042")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason != api.ReasonTermChanged {
		t.Errorf("T1's late checkpoint while T2 (%d) is current: %v, want 409 %s", t2, err, api.ReasonTermChanged)
	}
	l, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(ctx, partition.PartitionLease(g.lease, p), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[partition.CheckpointAnnotation]; !strings.Contains(got, `"value":"offset=2000"`) || !strings.Contains(got, fmt.Sprintf(`"fencingToken":%d`, t2)) {
		t.Errorf("partition %d's stored checkpoint after T1's late one: %q, want T2's offset=2000", p, got)
	}

	_, err = a.api().ReleasePartitionTerm(ctx, p, t1)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason != api.ReasonTermChanged {
		t.Errorf("T1's late release while T2 (%d) is current: %v, want 409 %s", t2, err, api.ReasonTermChanged)
	}
	l, err = controlPlane.AdminClient().CoordinationV1().Leases("default").Get(ctx, partition.PartitionLease(g.lease, p), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder, token := ptr.Deref(l.Spec.HolderIdentity, ""), int64(ptr.Deref(l.Spec.LeaseTransitions, 0)); holder != a.name || token != t2 {
		t.Errorf("partition %d's Lease after T1's late release: %q in term %d, want %q in T2 (%d)", p, holder, token, a.name, t2)
	}
	if s, err := a.partitions(); err != nil || !ownsIn(s, p, t2) {
		t.Errorf("after T1's late release %s owns %+v (%v), want partition %d in T2 (%d)", a.name, s.Owned, err, p, t2)
	}
	if _, err := a.api().ReleasePartitionTerm(ctx, p, t2); err != nil {
		t.Errorf("releasing partition %d in T2: %v", p, err)
	}
}

func ownsIn(s api.Partitions, p int, token int64) bool {
	for _, o := range s.Owned {
		if o.Partition == p && o.FencingToken == token {
			return true
		}
	}
	return false
}

// TestStaleTermRelease: a single candidate leads in T1, releases, and
// takes the Lease back after its sit-out in T2. A POST /release left over
// from T1 is then answered 409 term-changed and T2 goes on (the Lease
// still names it); POST /acquire?fencingToken=T2 is answered 409
// term-current; POST /release?fencingToken=T2 releases.
func TestStaleTermRelease(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 1, candidateOptions{})
	a := g.WaitLeader(giveUp)
	ctx := context.Background()
	r, err := a.api().ReleaseTerm(ctx, mustLead(t, a).FencingToken)
	if err != nil || !r.Released {
		t.Fatalf("releasing T1: %+v %v", r, err)
	}
	t1 := r.FencingToken
	var t2 int64
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*leaseDuration, true, func(context.Context) (bool, error) {
		s, err := a.state()
		t2 = s.FencingToken
		return err == nil && s.IsLeader && s.FencingToken > t1, nil
	}); err != nil {
		t.Fatalf("%s did not lead again in a new term: %v\n%s", a.name, err, a.log())
	}

	var apiErr *api.Error
	_, err = a.api().ReleaseTerm(ctx, t1)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason != api.ReasonTermChanged {
		t.Errorf("T1's late release while T2 (%d) is current: %v, want 409 %s", t2, err, api.ReasonTermChanged)
	}
	if s := mustLead(t, a); s.FencingToken != t2 {
		t.Errorf("after T1's late release: token %d, want T2 (%d)", s.FencingToken, t2)
	}
	holder, token := leaseHolderOf(t, g.lease)
	if holder != a.name || token != t2 {
		t.Errorf("the Lease after T1's late release: %q in term %d, want %q in T2 (%d)", holder, token, a.name, t2)
	}
	_, err = a.api().AcquireAfterTerm(ctx, t2, 0)
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason != api.ReasonTermCurrent {
		t.Errorf("acquire after T2 while T2 is current: %v, want 409 %s", err, api.ReasonTermCurrent)
	}
	if r, err := a.api().ReleaseTerm(ctx, t2); err != nil || !r.Released {
		t.Errorf("releasing T2: %+v %v", r, err)
	}
}

// mustLead returns c's state, failing unless it leads; a leader's answer
// carries validForMs.
func mustLead(t *testing.T, c *candidate) api.Leader {
	t.Helper()
	s, err := c.state()
	if err != nil || !s.IsLeader {
		t.Fatalf("%s: %+v %v, want it to lead", c.name, s, err)
	}
	if s.ValidForMs == nil || *s.ValidForMs <= 0 || time.Duration(*s.ValidForMs)*time.Millisecond > leaseDuration {
		t.Errorf("%s leads with validForMs %v, want within (0, %v]", c.name, s.ValidForMs, leaseDuration)
	}
	return s
}

// leaseHolderOf reads the group's Lease from the API server.
func leaseHolderOf(t *testing.T, name string) (string, int64) {
	t.Helper()
	l, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, ""), int64(ptr.Deref(l.Spec.LeaseTransitions, 0))
}
