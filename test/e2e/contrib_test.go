//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// contribTTL is the --ttl the contrib-style candidates run with, the
// retired image's default; the sidecar derives 6.666s and 1.333s from it.
const contribTTL = 10 * time.Second

// startContribCandidate runs leader-elector with exactly the command line a
// chart of the retired k8s.gcr.io/leader-elector image passes. What a pod
// would supply otherwise comes from the environment: the kubeconfig (a pod
// has its service account; --use-cluster-credentials is a no-op) and a
// probe port of its own (a pod has its own network namespace, these
// candidates share the host's).
func startContribCandidate(t *testing.T, name, lease string) *candidate {
	t.Helper()
	ports := harnesstest.FreePorts(t, 2)
	return startCandidate(t, name, candidateOptions{
		bareArgs: true,
		ports:    ports,
		extraArgs: []string{
			"--election=" + lease,
			"--election-namespace=default",
			"--id=" + name,
			"--ttl=" + contribTTL.String(),
			fmt.Sprintf("--http=0.0.0.0:%d", ports[0]),
			"--use-cluster-credentials",
		},
		env: append(harness.CleanEnv(),
			"KUBECONFIG="+controlPlane.AdminKubeconfig(),
			fmt.Sprintf("LEADER_ELECTOR_PROBE_ADDRESS=127.0.0.1:%d", ports[1]),
		),
		// The old charts' probe.
		startedPath: "/",
	})
}

// oldPaths asks c what the retired image's pollers ask: GET / and GET
// /health (the {"name": <holder>} answer) and GET /isLeader.
func oldPaths(c *candidate) (names map[string]string, isLeader bool, err error) {
	names = map[string]string{}
	for _, path := range []string{"/", "/health", "/isLeader"} {
		code, _, body, err := c.do(http.MethodGet, path, nil)
		if err != nil {
			return nil, false, err
		}
		if code != http.StatusOK {
			return nil, false, fmt.Errorf("%s: GET %s = %d %s", c.name, path, code, body)
		}
		var v map[string]any
		if err := json.Unmarshal(body, &v); err != nil || len(v) != 1 {
			return nil, false, fmt.Errorf("%s: GET %s = %s, not the old image's one-field JSON", c.name, path, body)
		}
		if path == "/isLeader" {
			b, ok := v["isLeader"].(bool)
			if !ok {
				return nil, false, fmt.Errorf("%s: GET /isLeader = %s", c.name, body)
			}
			isLeader = b
			continue
		}
		n, ok := v["name"].(string)
		if !ok {
			return nil, false, fmt.Errorf("%s: GET %s = %s", c.name, path, body)
		}
		names[path] = n
	}
	return names, isLeader, nil
}

// waitOldPaths waits until every candidate's old paths name leader, and
// only leader says it leads.
func waitOldPaths(t *testing.T, members []*candidate, leader *candidate) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		for _, c := range members {
			names, isLeader, err := oldPaths(c)
			if err != nil {
				last = err.Error()
				return false, nil
			}
			if names["/"] != leader.name || names["/health"] != leader.name || isLeader != (c == leader) {
				last = fmt.Sprintf("%s: / and /health name %q and %q, /isLeader %v; want %s", c.name, names["/"], names["/health"], isLeader, leader.name)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the old paths do not answer as the retired image did: %s", last)
	}
}

// TestContribDropIn: candidates started with a contrib-style command line
// (--election, --election-namespace, --id, --ttl, --http=0.0.0.0:…,
// --use-cluster-credentials) elect exactly one leader, answer the old
// image's paths as it did on leader and follower, hand over gracefully,
// and say what the retired flags were mapped to.
func TestContribDropIn(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for i := range 3 {
		g.Add(startContribCandidate(t, fmt.Sprintf("%s-%d", lease, i), lease))
	}
	leader := g.WaitLeader(giveUp)
	waitOldPaths(t, g.Members(), leader)

	for _, c := range g.Members() {
		s, err := c.state()
		if err != nil {
			t.Fatal(err)
		}
		if s.LeaseDurationSeconds != int32(contribTTL/time.Second) {
			t.Errorf("%s: the Lease's duration is %ds, want the --ttl", c.name, s.LeaseDurationSeconds)
		}
		for _, want := range [][]string{
			{`"Flag is deprecated"`, `flag="--ttl"`, `leaseDuration="10s"`, `renewDeadline="6.666s"`, `retryPeriod="1.333s"`},
			{`"Flag is deprecated and has no effect"`, `flag="--use-cluster-credentials"`},
			{`non-loopback address`, `POST /release`},
		} {
			if !logHas(c.log(), want...) {
				t.Errorf("%s: no log line with %q", c.name, want)
			}
		}
	}

	// A graceful handover, as a rolling update's SIGTERM gives it: another
	// candidate leads within the lease duration (at once, since the Lease is
	// released) and the old paths follow.
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	leader.signal(syscall.SIGTERM)
	next := g.WaitLeader(contribTTL, leader)
	took := time.Since(sent)
	if code, err := leader.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("%s exited %d, %v after SIGTERM", leader.name, code, err)
	}
	var rest []*candidate
	for _, c := range g.Members() {
		if c.running() {
			rest = append(rest, c)
		}
	}
	waitOldPaths(t, rest, next)
	after, err := next.state()
	if err != nil {
		t.Fatal(err)
	}
	if after.FencingToken <= before.FencingToken {
		t.Errorf("fencing token %d after the handover, was %d", after.FencingToken, before.FencingToken)
	}
	t.Logf("graceful handover %s → %s in %v (token %d → %d)", leader.name, next.name, took.Round(time.Millisecond), before.FencingToken, after.FencingToken)

	// leader-elector status, the built binary, against the live candidates.
	for _, c := range rest {
		want := "(follower)"
		if c == next {
			want = "(leader)"
		}
		out := runStatus(t, 0, "--url="+c.apiURL)
		for _, part := range []string{"Leader: " + next.name, "This pod: " + c.name + " " + want, "Lease: default/" + lease, fmt.Sprintf("Fencing token: %d", after.FencingToken)} {
			if !strings.Contains(squeezeBlanks(out), part) {
				t.Errorf("%s: status lacks %q:\n%s", c.name, part, out)
			}
		}
		var l api.Leader
		if err := json.Unmarshal([]byte(runStatus(t, 0, "-o", "json", "--url="+c.apiURL)), &l); err != nil {
			t.Fatal(err)
		}
		if l.Identity != c.name || l.Holder != next.name || l.IsLeader != (c == next) {
			t.Errorf("%s: status -o json = %+v", c.name, l)
		}
	}
	// The one that left: nothing answers on its port any more.
	runStatus(t, 1, "--url="+leader.apiURL, "--timeout=1s")
}

// runStatus runs `leader-elector status args...` and checks its exit code.
func runStatus(t *testing.T, wantCode int, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"status"}, args...)...)
	cmd.Env = harness.CleanEnv()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	if exitErr, ok := err.(*exec.ExitError); ok {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != wantCode {
		t.Fatalf("leader-elector status %q: exit %d, want %d; stdout %q, stderr %q", args, code, wantCode, out, stderr.String())
	}
	return string(out)
}

// squeezeBlanks turns every run of blanks within a line into one space
// (status aligns its columns).
func squeezeBlanks(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}
