//go:build integration

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/partition"
	"github.com/leader-elector/leader-elector/test/invariant"
)

// partitionCount is N in the partition tests.
const partitionCount = 16

// settleBound is how long a group may take to reach a full and fair
// assignment after a change of members: a crashed member's partitions
// expire after the lease duration, then the survivors take them within a
// few retry periods; the surplus of a member moves one partition at a time,
// each in a few API round trips. The margin (twice the lease duration plus
// ten retry periods, 13s at the e2e timings) is for a busy two-core machine
// running race-enabled binaries; the measured times are logged.
const settleBound = 2*leaseDuration + 10*retryPeriod

func (c *candidate) partitions() (api.Partitions, error) {
	return c.api().Partitions(context.Background())
}

// partitionGroup is a set of partition-mode members, with a monitor that
// checks every partition's safety over the whole run.
type partitionGroup struct {
	t     *testing.T
	lease string
	// opts are the options of every member (lease, namespace, kubeconfig).
	opts    candidateOptions
	mu      sync.Mutex
	members []*candidate
	stopped map[*candidate]bool
	next    int
}

func newPartitionGroup(t *testing.T, opts candidateOptions) *partitionGroup {
	return newPartitionGroupN(t, opts, partitionCount)
}

// newPartitionGroupN is newPartitionGroup for a test that reshards the group
// up to maxN partitions: its monitor expects partitions 0..maxN-1 to be
// owned at some point.
func newPartitionGroupN(t *testing.T, opts candidateOptions, maxN int) *partitionGroup {
	if opts.lease == "" {
		opts.lease = leaseName(t)
	}
	opts.extraArgs = append(opts.extraArgs, fmt.Sprintf("--partitions=%d", partitionCount))
	// The members have no app to release a draining partition; the tests
	// of the handover itself (drain_test.go) give their own drain timeout.
	if !slices.ContainsFunc(opts.extraArgs, func(a string) bool { return strings.HasPrefix(a, "--drain-timeout=") }) {
		opts.extraArgs = append(opts.extraArgs, "--drain-timeout=0s")
	}
	opts.startedPath = "/partitions"
	g := &partitionGroup{t: t, lease: opts.lease, opts: opts, stopped: map[*candidate]bool{}}
	startPartitionMonitorN(t, g.all, maxN)
	return g
}

// join starts n members at once.
func (g *partitionGroup) join(n int) []*candidate {
	var wg sync.WaitGroup
	started := make([]*candidate, n)
	for i := range n {
		g.mu.Lock()
		name := fmt.Sprintf("%s-%d", g.lease, g.next)
		g.next++
		g.mu.Unlock()
		wg.Go(func() {
			started[i] = startCandidate(g.t, name, g.opts)
		})
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range started {
		if c == nil {
			g.t.FailNow()
		}
		g.members = append(g.members, c)
	}
	return started
}

func (g *partitionGroup) all() []*candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*candidate(nil), g.members...)
}

// live are the members that run and are not stopped.
func (g *partitionGroup) live() []*candidate {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []*candidate
	for _, c := range g.members {
		if c.running() && !g.stopped[c] {
			out = append(out, c)
		}
	}
	return out
}

func (g *partitionGroup) setStopped(c *candidate, stopped bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.stopped[c] = stopped
}

// waitFair waits until every live member sees all of them as members, every
// partition is owned by exactly one of them and each owns its fair share,
// and returns how long that took from since.
func (g *partitionGroup) waitFair(what string, since time.Time) time.Duration {
	g.t.Helper()
	return g.waitFairN(what, partitionCount, since)
}

// waitFairN is waitFair for a group that works with n partitions (a
// rolling update changes N).
func (g *partitionGroup) waitFairN(what string, n int, since time.Time) time.Duration {
	g.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, settleBound, true, func(context.Context) (bool, error) {
		ok, why := fairNowN(g.live(), n)
		last = why
		return ok, nil
	})
	took := time.Since(since)
	if err != nil {
		g.t.Fatalf("%s: no full and fair assignment within %v: %s", what, settleBound, last)
	}
	g.t.Logf("MEASURED partitions %s: full and fair assignment after %v", what, took.Round(time.Millisecond))
	return took
}

// fairNowN asks every member once and says whether the assignment of n
// partitions is full and fair, and if not, why: every member must work with
// n (its effective N; its own may be larger while a rolling update changes
// N) and own nothing at or above it.
func fairNowN(members []*candidate, n int) (bool, string) {
	m := len(members)
	lo, hi := n/m, (n+m-1)/m
	owner := map[int]string{}
	var counts []string
	for _, c := range members {
		s, err := c.partitions()
		if err != nil {
			return false, fmt.Sprintf("%s: %v", c.name, err)
		}
		if s.EffectivePartitions != n {
			return false, fmt.Sprintf("%s works with %d partitions (its own: %d), want %d", c.name, s.EffectivePartitions, s.Partitions, n)
		}
		if s.Members != m || !s.Member {
			return false, fmt.Sprintf("%s sees %d members (member: %t), want %d", c.name, s.Members, s.Member, m)
		}
		if len(s.Owned) < lo || len(s.Owned) > hi {
			return false, fmt.Sprintf("%s owns %d, want %d..%d", c.name, len(s.Owned), lo, hi)
		}
		for _, o := range s.Owned {
			if o.Partition >= n {
				return false, fmt.Sprintf("%s owns partition %d, beyond %d", c.name, o.Partition, n)
			}
			if prev, dup := owner[o.Partition]; dup {
				return false, fmt.Sprintf("partition %d reported by %s and %s", o.Partition, prev, c.name)
			}
			owner[o.Partition] = c.name
		}
		counts = append(counts, fmt.Sprintf("%s:%d", c.name, len(s.Owned)))
	}
	if len(owner) != n {
		return false, fmt.Sprintf("%d of %d partitions owned (%s)", len(owner), n, strings.Join(counts, " "))
	}
	return true, ""
}

// TestPartitionsFairShareAndSafety runs 16 partitions through 1 → 4 → 2 → 5
// members — joins, graceful leaves, SIGKILL, SIGSTOP/SIGCONT — and after each
// change waits for a full and fair assignment, while a monitor checks over
// the whole run that no partition is claimed by two members at once and that
// every partition's fencing token only grows.
func TestPartitionsFairShareAndSafety(t *testing.T) {
	t.Parallel()
	g := newPartitionGroup(t, candidateOptions{})

	start := time.Now()
	first := g.join(1)[0]
	g.waitFair("first member", start)

	start = time.Now()
	joined := g.join(3)
	g.waitFair("join 1→4", start)

	// Graceful leave: SIGTERM releases the partitions and the membership.
	start = time.Now()
	for _, c := range joined[1:] {
		c.signal(syscall.SIGTERM)
	}
	for _, c := range joined[1:] {
		if code, err := c.waitExit(giveUp); err != nil || code != 0 {
			t.Fatalf("%s: exit %d, %v", c.name, code, err)
		}
	}
	g.waitFair("graceful leave 4→2", start)

	start = time.Now()
	more := g.join(3)
	g.waitFair("join 2→5", start)

	// Crash: the survivors take the partitions when their Leases expire.
	start = time.Now()
	more[0].signal(syscall.SIGKILL)
	_, _ = more[0].waitExit(giveUp)
	g.waitFair("SIGKILL 5→4", start)

	// Pause: the paused member's claims lapse on its own clock; the others
	// take its partitions at expiry; when it resumes it claims nothing it
	// has not renewed, and rejoins.
	paused := more[1]
	start = time.Now()
	paused.signal(syscall.SIGSTOP)
	g.setStopped(paused, true)
	g.waitFair("SIGSTOP 4→3", start)
	start = time.Now()
	paused.signal(syscall.SIGCONT)
	g.setStopped(paused, false)
	g.waitFair("SIGCONT 3→4", start)

	// Two graceful leaves more, down to the first member alone.
	start = time.Now()
	for _, c := range []*candidate{joined[0], more[2]} {
		c.signal(syscall.SIGTERM)
		_, _ = c.waitExit(giveUp)
	}
	g.waitFair("graceful leave 4→2", start)
	if s, err := first.partitions(); err != nil || len(s.Owned) != partitionCount/2 {
		t.Fatalf("%s: %+v, %v", first.name, s, err)
	}
	// Members that stopped gracefully deleted their membership Leases; the
	// crashed one's stays behind.
	checkMembershipLeases(t, "default", g.lease, first, paused, more[0])
}

// checkMembershipLeases checks that the group's membership Leases are
// exactly those of want.
func checkMembershipLeases(t *testing.T, namespace, group string, want ...*candidate) {
	t.Helper()
	list, err := controlPlane.AdminClient().CoordinationV1().Leases(namespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: partition.GroupLabel + "=" + group + "," + partition.KindLabel + "=" + partition.KindMember,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got, wanted []string
	for _, l := range list.Items {
		got = append(got, l.Name)
	}
	for _, c := range want {
		wanted = append(wanted, partition.MemberLease(group, c.name))
	}
	sort.Strings(got)
	sort.Strings(wanted)
	if strings.Join(got, " ") != strings.Join(wanted, " ") {
		t.Errorf("membership Leases %v, want %v", got, wanted)
	}
}

// startPartitionMonitorN asks every member for GET /partitions all the time
// and, when the test ends, checks every partition with the shared checker
// (invariant.Partitions): no partition claimed by two members at once, none
// past its validUntil, every partition's fencing token only growing, and
// partitions 0..n-1 all owned at some point.
func startPartitionMonitorN(t *testing.T, members func() []*candidate, n int) {
	var (
		checker = invariant.NewPartitions()
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		seen    = map[*candidate]bool{}
	)
	poll := func(c *candidate) {
		defer wg.Done()
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			sent := time.Now()
			if s, err := c.partitions(); err == nil {
				checker.Record(c.name, sent, s.Owned)
			}
			select {
			case <-stop:
				return
			case <-c.done:
				return
			case <-tick.C:
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(pollInterval)
		defer tick.Stop()
		for {
			for _, c := range members() {
				if !seen[c] {
					seen[c] = true
					wg.Add(1)
					go poll(c)
				}
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		report := checker.Check(n)
		for _, v := range report.Violations {
			t.Errorf("safety: %s", v)
		}
		if report.More > 0 {
			t.Errorf("safety: … and %d more violations", report.More)
		}
		t.Logf("partition monitor: %d claims in %d answers checked", report.Claims, report.Observations)
	})
}
