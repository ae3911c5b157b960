package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/invariant"
)

// partitionResult holds the figures of the partition benchmark.
type partitionResult struct {
	// start is from the first member's start to the first full and fair
	// assignment of the whole group.
	start        time.Duration
	startMembers int
	// burst is from the first of the burst's members' start to the full
	// and fair assignment (--partition-burst); burstMembers how many
	// joined the one member that owned every partition.
	burst          time.Duration
	burstMembers   int
	joins, crashes []time.Duration
	// leaves (SIGTERM) and resumes (SIGCONT of a member frozen until the
	// others had taken its partitions).
	leaves, resumes []time.Duration
	safety          invariant.Report
	idle            idleResult
	owned           map[*candidate]int
	mem             map[*candidate]memory
	// runtime is each member's Go runtime gauges (harness.RuntimeGauges)
	// at the same moment: where the memory per partition goes.
	runtime map[*candidate]map[string]float64
	// windows are the rebalances (start, joins, crashes): from the change
	// to the full and fair assignment, when the group's API requests are
	// counted (rates, by window kind, once the audit log is read).
	windows []rebalanceWindow
	// users are the audit-log users of every member the run started.
	users map[string]bool
}

// rebalanceWindow is one rebalance and the group's API requests during it.
type rebalanceWindow struct {
	kind     string // "start", "join", "crash", "leave" or "resume"
	from, to time.Time
	requests int
}

func (w rebalanceWindow) rate() float64 { return float64(w.requests) / w.to.Sub(w.from).Seconds() }

// runPartitions measures partition mode: with Partitions partitions and
// PartitionMembers members, the time from a new member's start to a full
// and fair assignment (join), from a member's SIGKILL to a full and fair
// assignment among the survivors (crash), and each member's API requests
// while the group is idle, from the audit log. A monitor checks every
// partition's safety throughout (test/invariant); a violation fails the run.
func runPartitions(ctx context.Context, opts *options) (err error) {
	im := &impl{key: "partitions", pkg: ".", prefix: "pm", leaderElector: true, partitions: opts.Partitions}
	set, err := setUp(ctx, opts, "leader-elector-bench-partitions-", im)
	if err != nil {
		return err
	}
	defer func() { set.tearDown(opts, err != nil) }()
	work, cp, code := set.work, set.cp, set.code
	logf("control plane ready at %s; %d partitions, %d members; timings: lease %v, renew %v, retry %v",
		cp.Host(), opts.Partitions, opts.PartitionMembers, opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod)

	g := newGroup(opts, cp, im, "bench-partitions", work)
	defer g.stopAll()
	checker := invariant.NewPartitions()
	stopMonitor := monitorPartitions(g, checker, max(opts.PollInterval, 20*time.Millisecond))
	res := &partitionResult{users: map[string]bool{}}
	if err := (&rebalancer{opts: opts, g: g, res: res}).run(ctx); err != nil {
		return err
	}
	stopMonitor()
	res.safety = checker.Check(opts.Partitions)

	if err := idlePartitions(ctx, opts, g, res); err != nil {
		return err
	}
	counted := &implResult{idle: res.idle}
	if err := countRequests(cp, counted); err != nil {
		return err
	}
	res.idle = counted.idle
	if err := countRebalanceRequests(cp, res); err != nil {
		return err
	}

	table := renderPartitions(opts, res) + fmt.Sprintf("\nCode: %s, %s.\n", code, machine())
	fmt.Println()
	fmt.Print(table)
	if opts.Output != "" {
		if err := os.WriteFile(opts.Output, []byte(table), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", opts.Output, err)
		}
	}
	if n := res.safety.Count(); n > 0 {
		return fmt.Errorf("partition mode: %d safety violations: %s", n, strings.Join(res.safety.Violations, "; "))
	}
	return nil
}

// rebalancer drives the partition group through its rebalances and times
// each into res: the start, PartitionRounds joins and crashes, and a last
// join back to the full group for the idle measurement.
type rebalancer struct {
	opts *options
	g    *group
	res  *partitionResult
}

func (r *rebalancer) run(ctx context.Context) error {
	opts := r.opts
	started := 0
	if opts.PartitionBurst > 0 {
		if err := r.burst(ctx); err != nil {
			return err
		}
		started = 1 + opts.PartitionBurst
	}
	if rest := opts.PartitionMembers - 1 - started; rest > 0 {
		if err := r.start(ctx, rest); err != nil {
			return err
		}
	}
	for round := range opts.PartitionRounds {
		if err := r.round(ctx, round+1); err != nil {
			return err
		}
	}
	// Back to the full group for the idle measurement.
	if err := r.startMember(ctx); err != nil {
		return err
	}
	if _, err := waitPartitionsFair(ctx, r.g, opts.Partitions, time.Now(), r.bound()); err != nil {
		return fmt.Errorf("last join: %w", err)
	}
	return nil
}

// start starts n members one after another and times the first full and
// fair assignment from the first one's start.
func (r *rebalancer) start(ctx context.Context, n int) error {
	groupStart := time.Now()
	for range n {
		if err := r.startMember(ctx); err != nil {
			return err
		}
	}
	// The members start one after another, so the first assignment's
	// bound has a second more per member.
	took, err := r.measure(ctx, "start", groupStart, r.bound()+time.Duration(n)*time.Second)
	if err != nil {
		return fmt.Errorf("first assignment: %w", err)
	}
	r.res.start, r.res.startMembers = took, n
	logf("start: %d members full and fair %v after the first one started", n, took.Round(time.Millisecond))
	return nil
}

// burst starts one member, waits until it owns every partition, then starts
// PartitionBurst more one after another and times the full and fair
// assignment from the first one's start: with a drain timeout, one drain
// for all of them (partitions that become due while a drain runs join it).
func (r *rebalancer) burst(ctx context.Context) error {
	if err := r.startMember(ctx); err != nil {
		return err
	}
	if _, err := waitPartitionsFair(ctx, r.g, r.opts.Partitions, time.Now(), r.bound()); err != nil {
		return fmt.Errorf("first member: %w", err)
	}
	start := time.Now()
	for range r.opts.PartitionBurst {
		if err := r.startMember(ctx); err != nil {
			return err
		}
	}
	joined := time.Since(start)
	took, err := r.measure(ctx, "join", start, r.bound()+r.opts.PartitionDrainTimeout)
	if err != nil {
		return fmt.Errorf("burst join: %w", err)
	}
	r.res.burst, r.res.burstMembers = took, r.opts.PartitionBurst
	logf("burst join 1 -> %d: the members started within %v; full and fair %v after the first one started (drain timeout %v, acknowledged: %t)",
		1+r.opts.PartitionBurst, joined.Round(time.Millisecond), took.Round(time.Millisecond), r.opts.PartitionDrainTimeout, r.opts.PartitionAck)
	return nil
}

// round is one join (a new member) and one crash (SIGKILL to a live one,
// a different one each round).
func (r *rebalancer) round(ctx context.Context, n int) error {
	start := time.Now()
	if err := r.startMember(ctx); err != nil {
		return err
	}
	took, err := r.measure(ctx, "join", start, r.bound())
	if err != nil {
		return fmt.Errorf("join %d: %w", n, err)
	}
	r.res.joins = append(r.res.joins, took)
	logf("join %d: full and fair after %v", n, took.Round(time.Millisecond))

	live := r.g.Live()
	victim := live[(n-1)%len(live)]
	start = time.Now()
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-victim.Done()
	if took, err = r.measure(ctx, "crash", start, r.bound()); err != nil {
		return fmt.Errorf("crash %d: %w", n, err)
	}
	r.res.crashes = append(r.res.crashes, took)
	logf("crash %d: full and fair after %v", n, took.Round(time.Millisecond))

	// A graceful leave: the member releases its partitions at once.
	live = r.g.Live()
	if len(live) < 3 {
		return nil
	}
	leaver := live[n%len(live)]
	start = time.Now()
	if err := leaver.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	<-leaver.Done()
	if took, err = r.measure(ctx, "leave", start, r.bound()); err != nil {
		return fmt.Errorf("leave %d: %w", n, err)
	}
	r.res.leaves = append(r.res.leaves, took)
	logf("leave %d: full and fair after %v", n, took.Round(time.Millisecond))

	// A freeze and a resume: the others take the frozen member's
	// partitions when their Leases expire; after SIGCONT it rejoins.
	live = r.g.Live()
	frozen := live[0]
	if err := frozen.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	others := slices.DeleteFunc(slices.Clone(live), func(c *candidate) bool { return c == frozen })
	if _, err := waitPartitionsFairAmong(ctx, func() []*candidate { return others }, r.opts.Partitions, time.Now(), r.bound()); err != nil {
		_ = frozen.Signal(syscall.SIGCONT)
		return fmt.Errorf("freeze %d: %w", n, err)
	}
	start = time.Now()
	if err := frozen.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	if took, err = r.measure(ctx, "resume", start, r.bound()); err != nil {
		return fmt.Errorf("resume %d: %w", n, err)
	}
	r.res.resumes = append(r.res.resumes, took)
	logf("resume %d: full and fair after %v", n, took.Round(time.Millisecond))
	return nil
}

// bound is a settling bound, not a target: a crashed member's partitions
// wait for their Leases to expire; everything else takes a few round
// trips.
func (r *rebalancer) bound() time.Duration {
	return 3*r.opts.LeaseDuration + 20*r.opts.RetryPeriod + 30*time.Second
}

// startMember starts a member, whose requests the audit log counts, with
// its acknowledging app (--partition-ack).
func (r *rebalancer) startMember(ctx context.Context) error {
	c, err := r.g.start(ctx)
	if err != nil {
		return err
	}
	r.res.users[c.user] = true
	if r.opts.PartitionAck {
		go acknowledgeDrains(ctx, c)
	}
	return nil
}

// acknowledgeDrains is a member's app that releases each draining
// partition as soon as it sees it, in the partition's term, until the
// member exits. It releases the partitions of one drain concurrently, as
// the workers of a real app (one child per partition under `leader-elector
// run --partitions`) finish independently: one release after another
// measured the app's loop, not the sidecar (at 1,024 partitions about 7
// releases a second, so a drain of 768 ran into its timeout).
func acknowledgeDrains(ctx context.Context, c *candidate) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-c.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	api := c.API()
	type term struct {
		partition int
		token     int64
	}
	var (
		mu       sync.Mutex
		inFlight = map[term]bool{}
		workers  sync.WaitGroup
	)
	defer workers.Wait()
	// ackWorkers bounds the releases in flight: enough for a drain of
	// hundreds to go at once, few enough not to exhaust the member's HTTP
	// server or the benchmark's file descriptors.
	const ackWorkers = 32
	slots := make(chan struct{}, ackWorkers)
	var rev uint64
	for ctx.Err() == nil {
		s, err := api.WaitPartitions(ctx, rev, 30*time.Second)
		if err != nil {
			if pause(ctx, 100*time.Millisecond) != nil {
				return
			}
			continue
		}
		rev = s.Revision
		for _, o := range s.Owned {
			t := term{o.Partition, o.FencingToken}
			mu.Lock()
			skip := !o.Draining || inFlight[t]
			if !skip {
				inFlight[t] = true
			}
			mu.Unlock()
			if skip {
				continue
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			workers.Go(func() {
				defer func() { <-slots }()
				_, _ = api.ReleasePartitionTerm(ctx, t.partition, t.token)
				mu.Lock()
				delete(inFlight, t)
				mu.Unlock()
			})
		}
	}
}

// measure waits for a full and fair assignment after the change at from
// and keeps the rebalance's window, whose requests are counted later.
func (r *rebalancer) measure(ctx context.Context, kind string, from time.Time, bound time.Duration) (time.Duration, error) {
	took, err := waitPartitionsFair(ctx, r.g, r.opts.Partitions, from, bound)
	if err == nil {
		r.res.windows = append(r.res.windows, rebalanceWindow{kind: kind, from: from, to: from.Add(took)})
	}
	return took, err
}

// monitorPartitions asks every member, present and future, for GET
// /partitions every interval and feeds the checker, until the returned
// function is called.
func monitorPartitions(g *group, checker *invariant.Partitions, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	seen := map[*candidate]bool{}
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			for _, c := range g.Live() {
				if seen[c] {
					continue
				}
				seen[c] = true
				wg.Go(func() { pollPartitions(ctx, c, checker, interval) })
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

func pollPartitions(ctx context.Context, c *candidate, checker *invariant.Partitions, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		sent := time.Now()
		if s, err := c.API().Partitions(ctx); err == nil {
			checker.Record(c.Name(), sent, s.Owned)
		}
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-tick.C:
		}
	}
}

// waitPartitionsFair waits until every live member sees all of them as
// members, every partition is owned by exactly one of them and each owns
// ⌊N/M⌋ or ⌈N/M⌉, and returns the time since start.
func waitPartitionsFair(ctx context.Context, g *group, n int, start time.Time, timeout time.Duration) (time.Duration, error) {
	return waitPartitionsFairAmong(ctx, g.Live, n, start, timeout)
}

// waitPartitionsFairAmong is waitPartitionsFair among the members that
// members returns (a frozen one left out).
func waitPartitionsFairAmong(ctx context.Context, members func() []*candidate, n int, start time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	why := ""
	for time.Now().Before(deadline) {
		var ok bool
		if ok, why = partitionsFair(ctx, members(), n); ok {
			return time.Since(start), nil
		}
		if err := pause(ctx, 5*time.Millisecond); err != nil {
			return 0, err
		}
	}
	return 0, fmt.Errorf("no full and fair assignment within %v: %s", timeout, why)
}

func partitionsFair(ctx context.Context, members []*candidate, n int) (bool, string) {
	m := len(members)
	lo, hi := n/m, (n+m-1)/m
	owners := map[int]bool{}
	for _, c := range members {
		s, err := c.API().Partitions(ctx)
		switch {
		case err != nil:
			return false, err.Error()
		case !s.Member || s.Members != m:
			return false, fmt.Sprintf("%s sees %d members (member: %t), want %d", c.Name(), s.Members, s.Member, m)
		case len(s.Owned) < lo || len(s.Owned) > hi:
			return false, fmt.Sprintf("%s owns %d, want %d..%d", c.Name(), len(s.Owned), lo, hi)
		}
		for _, o := range s.Owned {
			if owners[o.Partition] {
				return false, fmt.Sprintf("partition %d reported twice", o.Partition)
			}
			owners[o.Partition] = true
		}
	}
	return len(owners) == n, fmt.Sprintf("%d of %d partitions owned", len(owners), n)
}

// idlePartitions lets the stable group sit, unpolled, for IdleWindow and
// records the window for countRequests.
func idlePartitions(ctx context.Context, opts *options, g *group, res *partitionResult) error {
	members := g.Live()
	logf("partitions idle: %d members; settling %v, then measuring %v", len(members), opts.IdleWarmup, opts.IdleWindow)
	if err := pause(ctx, opts.IdleWarmup); err != nil {
		return err
	}
	from := time.Now()
	if err := pause(ctx, opts.IdleWindow); err != nil {
		return err
	}
	res.idle = idleResult{from: from, to: time.Now(), leader: members[0], followers: members[1:], cpu: map[*candidate]float64{}}
	res.owned = map[*candidate]int{}
	res.mem = map[*candidate]memory{}
	res.runtime = map[*candidate]map[string]float64{}
	for _, c := range members {
		res.idle.cpu[c] = 0
		m, err := residentMemory(c.Pid())
		if err != nil {
			return err
		}
		res.mem[c] = m
		if res.runtime[c], err = harness.RuntimeMetrics(ctx, c.HTTPClient(), c.ProbeURL()+"/metrics"); err != nil {
			return err
		}
		s, err := c.API().Partitions(ctx)
		if err != nil {
			return err
		}
		res.owned[c] = len(s.Owned)
	}
	return nil
}

// countRebalanceRequests counts the group's audited API requests in each
// rebalance window: every member's, the ones that left included.
func countRebalanceRequests(cp *cluster.ControlPlane, res *partitionResult) error {
	events, err := cp.AuditEvents()
	if err != nil {
		return err
	}
	for _, ev := range events {
		if !res.users[ev.User.Username] {
			continue
		}
		for i := range res.windows {
			w := &res.windows[i]
			if !ev.RequestReceivedTimestamp.Before(w.from) && ev.RequestReceivedTimestamp.Before(w.to) {
				w.requests++
			}
		}
	}
	return nil
}

// renderPartitions prints the figures as a markdown table and notes.
func renderPartitions(opts *options, res *partitionResult) string {
	var b strings.Builder
	apps := "no app releases a draining partition"
	if opts.PartitionAck {
		apps = "every member's app releases a draining partition as soon as it sees it"
	}
	fmt.Fprintf(&b, "Partition mode: %d partitions, %d members; lease %v, renew %v, retry %v; drain timeout %v (%s).\n\n",
		opts.Partitions, opts.PartitionMembers, opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod, opts.PartitionDrainTimeout, apps)
	b.WriteString("| measure | median | max | runs |\n|---|---|---|---|\n")
	fmt.Fprintf(&b, "| join → full and fair assignment (from the new member's start) | %s | %s | %d |\n", ms(percentile(res.joins, 0.5)), ms(maxDuration(res.joins)), len(res.joins))
	fmt.Fprintf(&b, "| crash (SIGKILL) → full and fair assignment | %s | %s | %d |\n", ms(percentile(res.crashes, 0.5)), ms(maxDuration(res.crashes)), len(res.crashes))
	if len(res.leaves) > 0 {
		fmt.Fprintf(&b, "| graceful leave (SIGTERM) → full and fair assignment | %s | %s | %d |\n", ms(percentile(res.leaves, 0.5)), ms(maxDuration(res.leaves)), len(res.leaves))
	}
	if len(res.resumes) > 0 {
		fmt.Fprintf(&b, "| resume (SIGCONT of a member frozen until the others took its partitions) → full and fair assignment | %s | %s | %d |\n", ms(percentile(res.resumes, 0.5)), ms(maxDuration(res.resumes)), len(res.resumes))
	}
	if res.burstMembers > 0 {
		fmt.Fprintf(&b, "| burst join: 1 member owns every partition, %d start one after another → full and fair assignment (from the first one's start) | %s | %s | 1 |\n", res.burstMembers, ms(res.burst), ms(res.burst))
	}
	if res.startMembers > 0 {
		fmt.Fprintf(&b, "| start: first of %d members started (one after another) → full and fair assignment | %s | %s | 1 |\n", res.startMembers, ms(res.start), ms(res.start))
	}
	atRest := 0.0
	for _, c := range append([]*candidate{res.idle.leader}, res.idle.followers...) {
		atRest += res.idle.rate(c)
	}
	fmt.Fprintf(&b, "\nAPI requests per second of the whole group (audit log): at rest %.1f (expected (partitions + members) ÷ retry period = %.1f)", atRest, float64(opts.Partitions+opts.PartitionMembers)/opts.RetryPeriod.Seconds())
	for _, kind := range []string{"start", "join", "crash", "leave", "resume"} {
		var rates []float64
		for _, w := range res.windows {
			if w.kind == kind {
				rates = append(rates, w.rate())
			}
		}
		if len(rates) > 0 {
			sort.Float64s(rates)
			fmt.Fprintf(&b, "; during %s (from the change to the fair assignment) %.1f median, %.1f max", kind, rates[len(rates)/2], rates[len(rates)-1])
		}
	}
	b.WriteString(".\n")
	var rss, anon []float64
	for _, m := range res.mem {
		rss = append(rss, float64(m.rss)/(1<<20))
		anon = append(anon, float64(m.anon)/(1<<20))
	}
	if len(rss) > 0 {
		sort.Float64s(rss)
		sort.Float64s(anon)
		fmt.Fprintf(&b, "\nResident memory per member at the end of the idle window: VmRSS %.1f MiB median, %.1f MiB max; anonymous (heap, stacks) %.1f MiB median, %.1f MiB max.\n", rss[len(rss)/2], rss[len(rss)-1], anon[len(anon)/2], anon[len(anon)-1])
	}
	for _, c := range slices.SortedFunc(maps.Keys(res.runtime), func(a, b *candidate) int { return strings.Compare(a.Name(), b.Name()) }) {
		fmt.Fprintf(&b, "- %s, Go runtime: %s, %.0f OS threads\n", c.Name(), runtimeSummary(res.runtime[c]), res.runtime[c]["go_threads"])
	}
	fmt.Fprintf(&b, "\nIdle, over %v (audit log):\n\n| member | partitions owned | API requests/s | expected renewals/s ((owned + 1 membership Lease) ÷ retry period) | requests other than lease updates |\n|---|---|---|---|---|\n", res.idle.to.Sub(res.idle.from).Round(time.Second))
	members := append([]*candidate{res.idle.leader}, res.idle.followers...)
	sort.Slice(members, func(i, j int) bool { return members[i].Name() < members[j].Name() })
	for _, c := range members {
		other := 0
		for what, k := range res.idle.requests[c] {
			if what != "update leases" {
				other += k
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %.2f | %.2f | %d |\n", c.Name(), res.owned[c], res.idle.rate(c), float64(res.owned[c]+1)/opts.RetryPeriod.Seconds(), other)
	}
	fmt.Fprintf(&b, "\nSafety (every partition, whole run before the idle window): %d claims in %d answers, %d violations.\n", res.safety.Claims, res.safety.Observations, res.safety.Count())
	for _, v := range res.safety.Violations {
		fmt.Fprintf(&b, "- %s\n", v)
	}
	return b.String()
}
