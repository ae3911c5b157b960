package main

import (
	"github.com/leader-elector/leader-elector/test/invariant"

	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// implResult is everything measured for one implementation.
type implResult struct {
	impl *impl
	// handovers: SIGTERM → another candidate answers isLeader: true.
	handovers []time.Duration
	// toAnswer and toElection: process start → first answer on GET
	// /leader, → first answer naming a holder (see group).
	toAnswer, toElection []time.Duration
	// released counts handovers in which the Lease showed a cleared holder
	// before the new one.
	released int
	badExits []string
	// sseMem is each candidate's resident memory after the handovers, with
	// --handover-sse streams attached (leader-elector only).
	sseMem []memory
	// sseRuntime is each one's Go runtime gauges at the same moment.
	sseRuntime []map[string]float64
	// failovers: the old leader's last renewTime → the new acquireTime.
	failovers []time.Duration
	// killToAnswer: SIGKILL → another candidate answers isLeader: true.
	killToAnswer []time.Duration
	// early lists acquisitions before the old leader's Lease had run out.
	early []string
	// handoverRequests and crashRequests are the candidates' audited API
	// requests during each handover (SIGTERM → the new holder in the
	// Lease's history) and each crash takeover (SIGKILL → the same).
	handoverRequests, crashRequests []windowRequests
	monitor                         invariant.Report
	idle                            idleResult
	fanout                          fanoutResult
	// http and httpSSE combine the load runs without and with SSE clients,
	// httpRuns and httpSSERuns are each run.
	http, httpSSE         *loadResult
	httpRuns, httpSSERuns []loadResult
}

func (r *implResult) safetyViolations() int { return r.monitor.Count() + len(r.early) }

// followerMax is the largest value of f over the idle followers: the figure
// reported for "an idle follower" is the worst one.
func (r *implResult) followerMax(f func(*candidate) float64) float64 {
	v := 0.0
	for _, c := range r.idle.followers {
		v = math.Max(v, f(c))
	}
	return v
}

func (r *implResult) followerRate() float64 { return r.followerMax(r.idle.rate) }

// groupRate is the audited API requests per second of every candidate
// together: what a group of this size costs the API server at rest.
func (r *implResult) groupRate() float64 {
	total := r.idle.rate(r.idle.leader)
	for _, c := range r.idle.followers {
		total += r.idle.rate(c)
	}
	return total
}
func (r *implResult) followerCPU() float64 {
	return r.followerMax(func(c *candidate) float64 { return r.idle.cpu[c] })
}
func (r *implResult) followerRSS() float64 {
	return r.followerMax(func(c *candidate) float64 { return float64(r.idle.mem[c].rss) })
}

// row is one line of the table.
type row struct {
	figure, base, le, ratio, target, result string
}

// renderTable prints the comparison as a markdown table: the election
// timings, the API server's load at rest, the HTTP load, then memory, CPU
// and safety.
func renderTable(opts *options, base, le *implResult) string {
	window := le.idle.to.Sub(le.idle.from).Round(time.Second)
	rows := timingRows(opts, base, le)
	rows = append(rows, idleRequestRows(opts, base, le, window)...)
	rows = append(rows, httpRows(opts, base, le)...)
	rows = append(rows, resourceRows(base, le, window)...)

	var b strings.Builder
	column := "leader-elector"
	if opts.HealthGating {
		column += " (health gating on)"
	}
	fmt.Fprintf(&b, "| figure | baseline (client-go) | %s | ratio | target | |\n|---|---|---|---|---|---|\n", column)
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", r.figure, r.base, r.le, r.ratio, r.target, r.result)
	}
	return b.String()
}

// timingRows are the handover, start and crash failover times.
func timingRows(opts *options, base, le *implResult) []row {
	var rows []row
	dist := func(figure string, b, l []time.Duration, target string, ok func(p50, p99 time.Duration) bool) {
		bp50, bp99 := percentile(b, 0.5), percentile(b, 0.99)
		lp50, lp99 := percentile(l, 0.5), percentile(l, 0.99)
		rows = append(rows, row{
			figure: figure,
			base:   ms(bp50) + " / " + ms(bp99),
			le:     ms(lp50) + " / " + ms(lp99),
			ratio:  ratio(lp50.Seconds(), bp50.Seconds()) + " / " + ratio(lp99.Seconds(), bp99.Seconds()),
			target: target,
			result: verdict(ok(lp50, lp99)),
		})
	}

	dist(fmt.Sprintf("graceful handover: SIGTERM to the leader → a new leader answers `isLeader: true`, p50 / p99 (n=%d)", len(le.handovers)),
		base.handovers, le.handovers, "p50 ≤ 25 ms, p99 ≤ 75 ms",
		func(p50, p99 time.Duration) bool { return p50 <= 25*time.Millisecond && p99 <= 75*time.Millisecond })
	dist(fmt.Sprintf("start: process started → first answer on `GET /leader` (polled every 20 ms), p50 / p99 (n=%d)", len(le.toAnswer)),
		base.toAnswer, le.toAnswer, "—", func(time.Duration, time.Duration) bool { return true })
	rows[len(rows)-1].result = ""
	dist(fmt.Sprintf("start: process started → first `GET /leader` naming the holder (polled every 1 ms), p50 / p99 (n=%d)", len(le.toElection)),
		base.toElection, le.toElection, "—", func(time.Duration, time.Duration) bool { return true })
	rows[len(rows)-1].result = ""
	crashBound := opts.LeaseDuration + 50*time.Millisecond
	dist(fmt.Sprintf("crash failover: old leader's last `renewTime` → new holder's `acquireTime`, p50 / p99 (n=%d)", len(le.failovers)),
		base.failovers, le.failovers, "≤ lease-duration + 50 ms = "+ms(crashBound),
		func(_, p99 time.Duration) bool { return p99 <= crashBound && maxDuration(le.failovers) <= crashBound })
	rows = append(rows, row{
		figure: "crash: Lease taken before the old leader's had run out (`acquireTime` < last `renewTime` + lease-duration)",
		base:   fmt.Sprint(len(base.early)), le: fmt.Sprint(len(le.early)), ratio: "—",
		target: "never", result: verdict(len(le.early) == 0),
	})
	return rows
}

// idleRequestRows are the audited API requests of the idle group.
func idleRequestRows(opts *options, base, le *implResult, window time.Duration) []row {
	return []row{
		{
			figure: fmt.Sprintf("API requests/s, idle follower (audit log, %v)", window),
			base:   fmt.Sprintf("%.3f", base.followerRate()), le: fmt.Sprintf("%.3f", le.followerRate()),
			ratio:  ratio(le.followerRate(), base.followerRate()),
			target: "≤ 0.02", result: verdict(le.followerRate() <= 0.02),
		},
		{
			figure: fmt.Sprintf("API requests/s, the whole group of %d idle (audit log, %v)", opts.Candidates, window),
			base:   fmt.Sprintf("%.3f", base.groupRate()), le: fmt.Sprintf("%.3f", le.groupRate()),
			ratio:  ratio(le.groupRate(), base.groupRate()),
			target: "≤ 1", result: verdict(le.groupRate() <= 1),
		},
		{
			figure: fmt.Sprintf("API requests/s, leader (audit log, %v)", window),
			base:   fmt.Sprintf("%.3f", base.idle.rate(base.idle.leader)), le: fmt.Sprintf("%.3f", le.idle.rate(le.idle.leader)),
			ratio:  ratio(le.idle.rate(le.idle.leader), base.idle.rate(base.idle.leader)),
			target: "≤ baseline", result: verdict(le.idle.rate(le.idle.leader) <= base.idle.rate(base.idle.leader)+1/le.idle.seconds()),
		},
	}
}

// httpRows are the GET /leader load runs, without and with SSE clients;
// none if they were not run.
func httpRows(opts *options, base, le *implResult) []row {
	var rows []row
	if le.http != nil && base.http != nil {
		rows = append(rows,
			row{
				figure: fmt.Sprintf("`GET /leader`, %d keep-alive connections: requests/s", opts.HTTPConns),
				base:   fmt.Sprintf("%.0f", base.http.rps()), le: fmt.Sprintf("%.0f", le.http.rps()),
				ratio:  ratio(le.http.rps(), base.http.rps()),
				target: "≥ 20 000", result: verdict(le.http.rps() >= 20000 && le.http.errors == 0),
			},
			row{
				figure: fmt.Sprintf("`GET /leader`, %d keep-alive connections: latency p50 / p99", opts.HTTPConns),
				base:   ms(base.http.p50) + " / " + ms(base.http.p99), le: ms(le.http.p50) + " / " + ms(le.http.p99),
				ratio:  ratio(le.http.p99.Seconds(), base.http.p99.Seconds()) + " (p99)",
				target: "p99 ≤ 5 ms", result: verdict(le.http.p99 <= 5*time.Millisecond),
			},
		)
	}
	if le.http != nil && le.httpSSE != nil {
		slower := 1 - le.httpSSE.rps()/le.http.rps()
		rows = append(rows,
			row{
				figure: fmt.Sprintf("… with %d SSE clients on `/events`: requests/s", opts.SSEClients),
				base:   "—", le: fmt.Sprintf("%.0f (%+.1f%%)", le.httpSSE.rps(), -100*slower), ratio: "—",
				target: "≤ 10% slower", result: verdict(slower <= 0.10 && le.httpSSE.errors == 0),
			},
			row{
				figure: fmt.Sprintf("… with %d SSE clients on `/events`: latency p50 / p99", opts.SSEClients),
				base:   "—", le: ms(le.httpSSE.p50) + " / " + ms(le.httpSSE.p99), ratio: "—",
				target: "—", result: "",
			},
		)
	}
	return rows
}

// resourceRows are the idle candidates' memory and CPU, and the safety
// violations.
func resourceRows(base, le *implResult, window time.Duration) []row {
	return []row{
		{
			figure: "resident memory (VmRSS), idle follower",
			base:   mib(base.followerRSS()), le: mib(le.followerRSS()),
			ratio:  ratio(le.followerRSS(), base.followerRSS()),
			target: "≤ 18 MiB", result: verdict(le.followerRSS() <= 18<<20),
		},
		{
			figure: "resident memory (VmRSS), leader",
			base:   mib(float64(base.idle.mem[base.idle.leader].rss)), le: mib(float64(le.idle.mem[le.idle.leader].rss)),
			ratio:  ratio(float64(le.idle.mem[le.idle.leader].rss), float64(base.idle.mem[base.idle.leader].rss)),
			target: "≤ 18 MiB", result: verdict(le.idle.mem[le.idle.leader].rss <= 18<<20),
		},
		{
			figure: fmt.Sprintf("CPU, idle follower (utime+stime over %v)", window),
			base:   millicores(base.followerCPU()), le: millicores(le.followerCPU()),
			ratio:  ratio(le.followerCPU(), base.followerCPU()),
			target: "≤ 1 millicore", result: verdict(le.followerCPU() <= 1),
		},
		{
			figure: fmt.Sprintf("CPU, leader (utime+stime over %v)", window),
			base:   millicores(base.idle.cpu[base.idle.leader]), le: millicores(le.idle.cpu[le.idle.leader]),
			ratio:  ratio(le.idle.cpu[le.idle.leader], base.idle.cpu[base.idle.leader]),
			target: "—", result: "",
		},
		{
			figure: fmt.Sprintf("CPU of the whole idle group per write of its Lease (%d writes of an annotation, above the idle rate)", fanoutWrites),
			base:   ms(base.fanout.perWrite), le: ms(le.fanout.perWrite), ratio: "—",
			target: "—", result: "",
		},
		{
			figure: "safety violations (monitor: overlapping claims, claims past `validUntil`, fencing token going back; early takeovers)",
			base:   fmt.Sprint(base.safetyViolations()), le: fmt.Sprint(le.safetyViolations()), ratio: "—",
			target: "0", result: verdict(le.safetyViolations() == 0),
		},
	}
}

// renderNotes prints the run's settings and the details behind the table.
func renderNotes(opts *options, results []*implResult, took time.Duration, busyCores float64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Settings: lease %v, renew deadline %v, retry period %v, %d candidates; %d handovers (at least %v apart) and %d crashes each; monitor polls every %v; idle window %v after %v; HTTP runs of %v. Run took %v; the machine was busy %.2f cores on average meanwhile (everything: control plane, candidates, this program and any other process).\n",
		opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod, opts.Candidates, opts.Handovers, handoverSpacing, opts.Crashes,
		opts.PollInterval, opts.IdleWindow, opts.IdleWarmup, opts.HTTPDuration, took.Round(time.Second), busyCores)
	for _, r := range results {
		fmt.Fprintf(&b, "\n%s:\n", r.impl.key)
		writeFailoverNotes(&b, opts, r)
		writeIdleNotes(&b, r.idle)
		writeMonitorAndLoadNotes(&b, r)
	}
	var rest, secs float64
	for _, r := range results {
		for _, l := range []*loadResult{r.http, r.httpSSE} {
			if l != nil {
				rest += l.otherCores * l.elapsed.Seconds()
				secs += l.elapsed.Seconds()
			}
		}
	}
	if secs > 0 && rest/secs > disturbedCores {
		fmt.Fprintf(&b, "\nNote: the rest of the machine kept %.2f cores busy on average during the GET /leader runs (other work on this machine); those figures are lower than on a quiet machine.\n", rest/secs)
	}
	return b.String()
}

// writeFailoverNotes details the handovers and crash failovers of r.
func writeFailoverNotes(b *strings.Builder, opts *options, r *implResult) {
	fmt.Fprintf(b, "- handovers: %s; the Lease showed a release (cleared holder) in %d of %d\n", durations(r.handovers), r.released, len(r.handovers))
	if len(r.sseMem) > 0 {
		var rss []string
		for i, m := range r.sseMem {
			rss = append(rss, fmt.Sprintf("%s (anonymous %s; %s)", mib(float64(m.rss)), mib(float64(m.anon)), runtimeSummary(r.sseRuntime[i])))
		}
		on := "every candidate's"
		if opts.HandoverSSEOne {
			on = "one candidate's at a time (a follower when attached)"
		}
		fmt.Fprintf(b, "- handovers with %d SSE clients on %s `/events`; VmRSS of the candidates after them: %s\n", opts.HandoverSSE, on, strings.Join(rss, ", "))
	}
	for _, e := range r.badExits {
		fmt.Fprintf(b, "  - %s\n", e)
	}
	fmt.Fprintf(b, "- API requests of the candidates per handover (audit log, SIGTERM → the new holder in the Lease's history): %s\n", summarizeWindows(r.handoverRequests))
	fmt.Fprintf(b, "- crash failovers (renewTime → acquireTime): %s\n", durations(r.failovers))
	fmt.Fprintf(b, "- API requests of the candidates per crash takeover (audit log, SIGKILL → the new holder in the Lease's history): %s\n", summarizeWindows(r.crashRequests))
	fmt.Fprintf(b, "- crash, SIGKILL → a new leader answers: %s\n", durations(r.killToAnswer))
	for _, e := range r.early {
		fmt.Fprintf(b, "  - EARLY TAKEOVER: %s\n", e)
	}
}

// writeIdleNotes details each idle candidate's requests, memory and CPU.
func writeIdleNotes(b *strings.Builder, in idleResult) {
	audited := 0
	for _, c := range append([]*candidate{in.leader}, in.followers...) {
		var verbs []string
		n := 0
		for what, k := range in.requests[c] {
			verbs = append(verbs, fmt.Sprintf("%s %d", what, k))
			n += k
		}
		sort.Strings(verbs)
		audited += n
		role := "follower"
		if c == in.leader {
			role = "leader"
		}
		if len(verbs) == 0 {
			verbs = []string{"none"}
		}
		rt := ""
		if in.runtime[c] != nil {
			rt = "; " + runtimeSummary(in.runtime[c])
		}
		fmt.Fprintf(b, "- idle %s %s: %d requests in %.0fs (%s); VmRSS %s (anonymous %s, file-backed %s), CPU %s%s\n", role, c.Name(), n, in.seconds(), strings.Join(verbs, ", "),
			mib(float64(in.mem[c].rss)), mib(float64(in.mem[c].anon)), mib(float64(in.mem[c].file)), millicores(in.cpu[c]), rt)
	}
	fmt.Fprintf(b, "- apiserver_request_total{resource=\"leases\"} grew by %.0f in the idle window; the audit log attributes %d of them to the candidates, the rest is the API server's own Leases; the machine was busy %.2f cores meanwhile\n",
		in.leaseMetric, audited, in.machineCores)
}

// writeMonitorAndLoadNotes details the monitor's findings and each GET
// /leader load run.
func writeMonitorAndLoadNotes(b *strings.Builder, r *implResult) {
	fmt.Fprintf(b, "- monitor: %d answers, %d claims, %d violations\n", r.monitor.Observations, r.monitor.Claims, r.monitor.Count())
	for _, v := range r.monitor.Violations {
		fmt.Fprintf(b, "  - VIOLATION: %s\n", v)
	}
	if r.monitor.More > 0 {
		fmt.Fprintf(b, "  - … and %d more\n", r.monitor.More)
	}
	for _, l := range []struct {
		name string
		runs []loadResult
	}{{"GET /leader", r.httpRuns}, {"GET /leader with SSE clients", r.httpSSERuns}} {
		quiet := len(undisturbed(l.runs)) < len(l.runs)
		for _, run := range l.runs {
			left := ""
			if quiet && run.otherCores > disturbedCores {
				left = " — disturbed by other work, left out of the table"
			}
			fmt.Fprintf(b, "- %s: %.0f req/s (p50 %s, p99 %s, %d failed); CPU: the server %.2f cores, the load generator %.2f, the rest of the machine %.2f%s\n",
				l.name, run.rps(), ms(run.p50), ms(run.p99), run.errors, run.serverCores, run.clientCores, run.otherCores, left)
		}
	}
}

// rankOf is the 1-based nearest rank of quantile q among n values.
func rankOf(q float64, n int) int {
	r := int(math.Ceil(q * float64(n)))
	return max(1, min(r, n))
}

// percentile is the nearest-rank quantile q of ds (0 if empty).
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sortDurations(s)
	return s[rankOf(q, len(s))-1]
}

func maxDuration(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func sortDurations(ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
}

func durations(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = ms(d)
	}
	return strings.Join(parts, ", ")
}

// ms formats a duration for the table.
func ms(d time.Duration) string {
	switch {
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func mib(bytes float64) string { return fmt.Sprintf("%.1f MiB", bytes/(1<<20)) }

func millicores(m float64) string { return fmt.Sprintf("%.2f m", m) }

// ratio is leader-elector's figure over the baseline's.
func ratio(le, base float64) string {
	if base == 0 {
		return "—"
	}
	r := le / base
	if r < 0.1 {
		return fmt.Sprintf("%.3f", r)
	}
	return fmt.Sprintf("%.2f", r)
}

func verdict(ok bool) string {
	if ok {
		return "pass"
	}
	return "**miss**"
}

// runtimeSummary prints the Go runtime's gauges: where a process's anonymous
// memory goes (a stream's goroutines and stacks, the heap).
func runtimeSummary(rt map[string]float64) string {
	return fmt.Sprintf("%.0f goroutines, stacks %s, heap in use %s", rt["go_goroutines"], mib(rt["go_memstats_stack_inuse_bytes"]), mib(rt["go_memstats_heap_inuse_bytes"]))
}
