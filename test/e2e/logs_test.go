//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestJSONLogs: candidates started with --log-format=json and with
// LEADER_ELECTOR_LOGGING_FORMAT=json (Kubernetes components' flag name)
// elect a leader and hand over on SIGTERM; every line either wrote is a
// JSON object in the Kubernetes JSON log format: ts a number
// (milliseconds since the epoch), msg a string, v a number (error lines:
// err instead), durations strings; the leadership changes are lines at
// v=0 with their reason and fencing token.
func TestJSONLogs(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	started := float64(time.Now().UnixMilli())
	a := startCandidate(t, "json-a", candidateOptions{lease: lease, extraArgs: []string{"--log-format=json"}})
	b := startCandidate(t, "json-b", candidateOptions{lease: lease, env: []string{"LEADER_ELECTOR_LOGGING_FORMAT=json"}})
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	g.Add(a)
	g.Add(b)
	leader := g.WaitLeader(giveUp)
	next := a
	if leader == a {
		next = b
	}
	leader.signal(syscall.SIGTERM)
	if code, err := leader.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	g.WaitLeader(handoverBound, leader)
	// The new leader's line is written as it leads: wait for it, not for
	// the first answer.
	waitChangeLogged(t, next, "Became leader", "acquired")

	for _, c := range []*candidate{a, b} {
		lines := parseJSONLog(t, c, started)
		if _, ok := findLine(lines, "Starting", func(l map[string]any) bool { return l["leaseDuration"] == leaseDuration.String() }); !ok {
			t.Errorf("%s: no \"Starting\" line with leaseDuration %q (a duration is a string)", c.name, leaseDuration.String())
		}
		wantChanges := []string{"Became leader acquired"}
		if c == leader {
			wantChanges = append(wantChanges, "Stopped leading shutdown")
		}
		var changes []string
		for _, l := range lines {
			if l["msg"] == "Became leader" || l["msg"] == "Stopped leading" {
				if l["v"] != float64(0) {
					t.Errorf("%s: leadership change at v=%v, want 0: %v", c.name, l["v"], l)
				}
				if _, ok := l["fencingToken"].(float64); !ok {
					t.Errorf("%s: leadership change without a numeric fencingToken: %v", c.name, l)
				}
				changes = append(changes, fmt.Sprintf("%s %v", l["msg"], l["reason"]))
			}
		}
		if !slices.Equal(changes, wantChanges) {
			t.Errorf("%s logged the changes %q, want %q", c.name, changes, wantChanges)
		}
	}
}

// parseJSONLog parses every line c wrote (standard output and error) as a
// line of the Kubernetes JSON log format, failing the test on any other.
func parseJSONLog(t *testing.T, c *candidate, notBefore float64) []map[string]any {
	t.Helper()
	var lines []map[string]any
	scanner := bufio.NewScanner(strings.NewReader(c.log()))
	scanner.Buffer(nil, 1<<20)
	for scanner.Scan() {
		text := scanner.Text()
		var l map[string]any
		if err := json.Unmarshal([]byte(text), &l); err != nil {
			t.Errorf("%s: not a JSON object: %q: %v", c.name, text, err)
			continue
		}
		if ts, ok := l["ts"].(float64); !ok || ts < notBefore || ts > float64(time.Now().UnixMilli()) {
			t.Errorf("%s: ts = %v, want milliseconds since the epoch during the test: %s", c.name, l["ts"], text)
		}
		if _, ok := l["msg"].(string); !ok {
			t.Errorf("%s: msg is not a string: %s", c.name, text)
		}
		if v, hasV := l["v"]; hasV {
			if _, ok := v.(float64); !ok {
				t.Errorf("%s: v is not a number: %s", c.name, text)
			}
		} else if _, ok := l["err"].(string); !ok {
			t.Errorf("%s: neither v (an info line) nor err (an error line): %s", c.name, text)
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 {
		t.Errorf("%s wrote no log lines", c.name)
	}
	return lines
}

func findLine(lines []map[string]any, msg string, match func(map[string]any) bool) (map[string]any, bool) {
	for _, l := range lines {
		if l["msg"] == msg && match(l) {
			return l, true
		}
	}
	return nil, false
}

// waitChangeLogged waits until c has logged the leadership change msg
// ("Became leader", "Stopped leading") with reason, in either log format.
func waitChangeLogged(t *testing.T, c *candidate, msg, reason string) {
	t.Helper()
	text := []string{`"` + msg + `"`, `reason="` + reason + `"`}
	jsonLine := []string{`"msg":"` + msg + `"`, `"reason":"` + reason + `"`}
	logged := func(line string) bool {
		has := func(parts []string) bool {
			return !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) })
		}
		return has(text) || has(jsonLine)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return slices.ContainsFunc(strings.Split(c.log(), "\n"), logged), nil
	})
	if err != nil {
		t.Errorf("%s did not log %q with reason %q", c.name, msg, reason)
	}
}

// waitChangeRecorded waits until the Lease carries c's Event of the
// leadership change what ("became leader", "stopped leading") with reason.
func waitChangeRecorded(t *testing.T, c *candidate, lease, what, reason string) {
	t.Helper()
	prefix := fmt.Sprintf("%s %s (reason %s, fencing token ", c.name, what, reason)
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		got = leaseEvents(t, "default", lease)
		return slices.ContainsFunc(got, func(m string) bool { return strings.HasPrefix(m, prefix) }), nil
	})
	if err != nil {
		t.Errorf("no Event %q… on the Lease; it has:\n  %s", prefix, strings.Join(got, "\n  "))
	}
}
