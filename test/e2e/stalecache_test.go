//go:build integration

package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/internal/leasetest"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/serverclock"
)

// TestStaleCacheCannotTakeTheLease: a candidate whose Lease cache is
// deliberately stale — its watch shows an old version of the Lease and never
// delivers anything newer, so the holder seems to have stopped renewing —
// tries to take the Lease from a live leader. Its writes carry the stale resourceVersion, so
// the API server refuses them (409), and it never claims leadership.
func TestStaleCacheCannotTakeTheLease(t *testing.T) {
	lease := leaseName(t)
	leader := startCandidate(t, "live-leader", candidateOptions{lease: lease})
	g := groupOf(t, lease, leader)
	g.WaitLeader(giveUp)
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}

	// The stale version is a real one: the Lease as it was, before the
	// leader's next renewals. (A made-up object with the current
	// resourceVersion would be a version the API server never had.)
	leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
	stale, err := leases.Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(ctx context.Context) (bool, error) {
		now, err := leases.Get(ctx, lease, metav1.GetOptions{})
		return err == nil && now.ResourceVersion != stale.ResourceVersion, nil
	})
	if err != nil {
		t.Fatalf("the leader did not renew: %v", err)
	}
	// The fake clientset serves this version forever: to the stale
	// candidate the holder looks silent, so after a lease duration it tries
	// to take the Lease.
	staleWatches := fake.NewClientset(stale)
	// The reflector falls back to list and watch, which the fake serves.
	leasetest.RefuseWatchLists(staleWatches)

	conflictsBefore := leaseConflicts(t)
	serverClock := serverclock.New(nil)
	requests, _, err := election.NewClientsets(controlPlane.AdminConfig(), renewDeadline, serverClock)
	if err != nil {
		t.Fatal(err)
	}
	stalePod, err := election.New(election.Config{
		LeaseSpec: election.LeaseSpec{
			Namespace: "default",
			Name:      lease,
			Identity:  "stale-cache",
			Timings:   leasetimings.Timings{LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod},
		},
		Client:      requests,
		WatchClient: staleWatches,
		ServerClock: serverClock,
	})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- stalePod.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	// Two lease durations: long enough for the stale view to look expired
	// too (the stale version never changes).
	if err := holdsFor(2*leaseDuration+e2eSlack, 10*time.Millisecond, func() error {
		if s := stalePod.Snapshot(); s.IsLeader {
			return fmt.Errorf("the candidate with a stale cache claimed leadership: %+v", s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	after, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	if !after.IsLeader || after.FencingToken != before.FencingToken {
		t.Errorf("the live leader lost its term: before %+v, after %+v", before, after)
	}
	got, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *got.Spec.HolderIdentity != leader.name {
		t.Errorf("Lease holder %q, want %q", *got.Spec.HolderIdentity, leader.name)
	}
	conflicts := leaseConflicts(t) - conflictsBefore
	if conflicts < 1 {
		t.Errorf("the stale candidate never tried to take the Lease (no 409 on leases); the test proves nothing")
	}
	t.Logf("the stale candidate's %d attempts were refused with 409 Conflict; it never claimed leadership", conflicts)
}

var conflictSeries = regexp.MustCompile(`(?m)^apiserver_request_total\{([^}]*)\} (\d+)`)

// leaseConflicts counts the API server's 409 answers to lease updates.
func leaseConflicts(t *testing.T) int {
	t.Helper()
	text, err := controlPlane.MetricsText(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, m := range conflictSeries.FindAllStringSubmatch(text, -1) {
		labels := m[1]
		if strings.Contains(labels, `resource="leases"`) && strings.Contains(labels, `code="409"`) && strings.Contains(labels, `verb="PUT"`) {
			n, _ := strconv.Atoi(m[2])
			total += n
		}
	}
	return total
}
