package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/test/cluster"
)

// clockTicksPerSecond is USER_HZ, the unit of utime and stime in
// /proc/<pid>/stat: 100 on every Linux architecture Go supports.
const clockTicksPerSecond = 100

// cpuTicks is the process's user plus system CPU time, in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name, in parentheses, may contain spaces: count fields
	// from the last ')'. utime and stime are fields 14 and 15; the field
	// after ')' is field 3.
	i := bytes.LastIndexByte(b, ')')
	fields := strings.Fields(string(b[i+1:]))
	if i < 0 || len(fields) < 13 {
		return 0, fmt.Errorf("read CPU time: unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read CPU time: unexpected /proc/%d/stat", pid)
	}
	return utime + stime, nil
}

// machineBusyTicks is the CPU time the whole machine spent on anything but
// idling (user, nice, system, irq, softirq, steal), in clock ticks summed over
// all CPUs: with it, a figure can say how busy the machine was besides the
// processes measured.
func machineBusyTicks() (uint64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("read machine CPU time: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("read machine CPU time: unexpected /proc/stat line %q", line)
	}
	var busy uint64
	for i, f := range fields[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("read machine CPU time: %q: %w", line, err)
		}
		busy += v
	}
	return busy, nil
}

// memory is a process's resident memory from /proc/<pid>/status, in bytes:
// VmRSS, and its parts RssAnon (heap, stacks) and RssFile (the mapped
// binary's pages).
type memory struct {
	rss, anon, file uint64
}

func residentMemory(pid int) (memory, error) {
	var m memory
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, fmt.Errorf("read resident memory: %w", err)
	}
	fields := map[string]*uint64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "RssFile:": &m.file}
	found := 0
	for line := range strings.Lines(string(b)) {
		for prefix, dst := range fields {
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return m, fmt.Errorf("read resident memory: %q: %w", line, err)
			}
			*dst = kb << 10
			found++
		}
	}
	if found != len(fields) {
		return m, fmt.Errorf("read resident memory: /proc/%d/status lacks VmRSS, RssAnon or RssFile", pid)
	}
	return m, nil
}

// leaseRequestTotal sums apiserver_request_total over every series with
// resource="leases". The metric has no user or user-agent label, so it counts
// every client, the API server's own lease renewals included.
func leaseRequestTotal(ctx context.Context, cp *cluster.ControlPlane) (float64, error) {
	text, err := cp.MetricsText(ctx)
	if err != nil {
		return 0, err
	}
	var sum float64
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="leases"`) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' ')+1:]), 64)
		if err != nil {
			return 0, fmt.Errorf("parse %q: %w", line, err)
		}
		sum += v
	}
	return sum, nil
}

// countRequests attributes the audited requests of the idle window to the
// candidates. It runs after the window, once the API server has written the
// events of every request received in it.
func countRequests(cp *cluster.ControlPlane, res *implResult) error {
	events, err := cp.AuditEvents()
	if err != nil {
		return err
	}
	r := &res.idle
	byUser := map[string]*candidate{r.leader.user: r.leader}
	for _, f := range r.followers {
		byUser[f.user] = f
	}
	r.requests = map[*candidate]map[string]int{}
	for c := range r.cpu {
		r.requests[c] = map[string]int{}
	}
	for _, ev := range events {
		c, ok := byUser[ev.User.Username]
		if !ok || ev.RequestReceivedTimestamp.Before(r.from) || !ev.RequestReceivedTimestamp.Before(r.to) {
			continue
		}
		what := ev.Verb
		if ev.ObjectRef != nil {
			what += " " + ev.ObjectRef.Resource
		}
		r.requests[c][what]++
	}
	return nil
}

// windowRequests counts the candidates' audited API requests in [from, to):
// what one handover or crash takeover costs the API server.
type windowRequests struct {
	from, to time.Time
	// writes are the requests that change the Lease (create, update,
	// patch); refused are those of them the API server answered 409
	// Conflict (another write came first), failed those it answered with
	// any other error (429 Too Many Requests when its queues are full; the
	// client retries those); other is everything else.
	writes, refused, failed, other int
}

// countWindowRequests fills in each window's counts from the audit log, for
// the requests of users (every candidate the run started).
func countWindowRequests(cp *cluster.ControlPlane, users map[string]bool, windows ...[]windowRequests) error {
	events, err := cp.AuditEvents()
	if err != nil {
		return err
	}
	for _, ws := range windows {
		for i := range ws {
			w := &ws[i]
			for _, ev := range events {
				if !users[ev.User.Username] || ev.RequestReceivedTimestamp.Before(w.from) || !ev.RequestReceivedTimestamp.Before(w.to) {
					continue
				}
				lease := ev.ObjectRef != nil && ev.ObjectRef.Resource == "leases"
				switch {
				case lease && (ev.Verb == "create" || ev.Verb == "update" || ev.Verb == "patch"):
					w.writes++
					switch code := responseCode(ev); {
					case code == http.StatusConflict:
						w.refused++
					case code >= 300:
						w.failed++
					}
				default:
					w.other++
				}
			}
		}
	}
	return nil
}

// summarizeWindows prints the median and the largest count of each kind.
func summarizeWindows(ws []windowRequests) string {
	if len(ws) == 0 {
		return "none"
	}
	stat := func(f func(windowRequests) int) string {
		v := make([]int, len(ws))
		for i, w := range ws {
			v[i] = f(w)
		}
		slices.Sort(v)
		return fmt.Sprintf("%d / %d", v[len(v)/2], v[len(v)-1])
	}
	var each []string
	for _, w := range ws {
		each = append(each, fmt.Sprintf("%d/%d/%d", w.writes, w.refused, w.failed))
	}
	return fmt.Sprintf("Lease writes p50 / max %s, of them refused (409 Conflict) %s and failed otherwise %s; other requests %s (n=%d); writes/refused/failed in order: %s",
		stat(func(w windowRequests) int { return w.writes }), stat(func(w windowRequests) int { return w.refused }),
		stat(func(w windowRequests) int { return w.failed }), stat(func(w windowRequests) int { return w.other }), len(ws), strings.Join(each, ", "))
}

// responseCode is the HTTP status of an audited request; 0 if the event
// has none (the API server wrote none for it).
func responseCode(ev cluster.AuditEvent) int {
	if ev.ResponseStatus == nil {
		return 0
	}
	return int(ev.ResponseStatus.Code)
}
