//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestBadFlags: every invalid configuration exits 2 with one line on stderr,
// before anything starts.
func TestBadFlags(t *testing.T) {
	t.Parallel()
	kubeconfig := "--kubeconfig=" + controlPlane.AdminKubeconfig()
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"missing lease name", []string{kubeconfig}, nil, "--lease-name is required"},
		{"invalid lease name", []string{"--lease-name=Not_Valid"}, nil, "not a valid DNS-1123 subdomain"},
		{"invalid namespace", []string{"--lease-name=a", "--lease-namespace=a.b"}, nil, "--lease-namespace"},
		{"lease not above renew", []string{"--lease-name=a", "--lease-duration=10s", "--renew-deadline=10s"}, nil, "must be greater than --renew-deadline"},
		{"renew not above 1.2 retry", []string{"--lease-name=a", "--renew-deadline=2s", "--retry-period=2s"}, nil, "--retry-period × 1.2"},
		{"non-positive duration", []string{"--lease-name=a", "--retry-period=0s"}, nil, "--retry-period must be positive"},
		{"fractional lease", []string{"--lease-name=a", "--lease-duration=15500ms"}, nil, "whole number of seconds"},
		{"unparsable duration", []string{"--lease-name=a", "--lease-duration=soon"}, nil, "invalid argument"},
		{"unparsable address", []string{"--lease-name=a", "--http-address=localhost"}, nil, "--http-address"},
		{"bad port", []string{"--lease-name=a", "--probe-address=:99999"}, nil, "invalid port"},
		{"unknown flag", []string{"--lease-name=a", "--no-such-flag"}, nil, "unknown flag"},
		{"unknown log format", []string{"--lease-name=a", "--log-format=xml"}, nil, "--log-format"},
		{"unknown readiness", []string{"--lease-name=a", "--readiness=always"}, nil, "--readiness"},
		{"bad env value", []string{"--lease-name=a"}, []string{"LEADER_ELECTOR_LEASE_DURATION=forever"}, "LEADER_ELECTOR_LEASE_DURATION"},
		{"bad env lease name", nil, []string{"LEADER_ELECTOR_LEASE_NAME=UPPER"}, "not a valid DNS-1123 subdomain"},
		{"alias conflict", []string{"--lease-name=a", "--election=b"}, nil, "disagree"},
		{"stray argument", []string{"--lease-name=a", "extra"}, nil, "unexpected arguments"},
		// Issue 11, section 4: the supported ranges.
		{"lease overflowing the Lease's seconds", []string{"--lease-name=a", "--lease-duration=1000000h", "--renew-deadline=999999h", "--retry-period=1h"}, nil, "--lease-duration 1000000h is outside the supported range 2s..24h"},
		{"nanosecond timings", []string{"--lease-name=a", "--lease-duration=1s", "--renew-deadline=3ns", "--retry-period=2ns"}, nil, "--retry-period 2ns is outside the supported range 100ms..24h"},
		{"derived client rate", []string{"--lease-name=a", "--partitions=1024", "--lease-duration=4s", "--renew-deadline=2s", "--retry-period=500ms"}, nil, "needs 2050 Lease requests per second"},
		{"identity with a newline", []string{"--lease-name=a", "--identity=pod\nfoo"}, nil, `--identity "pod\nfoo" is not a valid pod name`},
		{"identity of 10000 characters", []string{"--lease-name=a", "--identity=" + strings.Repeat("a", 10000)}, nil, "(10000 characters)"},
		{"identity that is the gate's sentinel", []string{"--lease-name=a", "--identity=(not admitted by the gate)"}, nil, "is not a valid pod name"},
		{"loopback pod IP", []string{"--lease-name=a", "--route=endpointslice", "--service=s", "--pod-ip=127.0.0.1"}, nil, "loopback"},
		{"unspecified pod IP", []string{"--lease-name=a", "--route=endpointslice", "--service=s", "--pod-ip=0.0.0.0"}, nil, "unspecified"},
		{"IPv4-mapped pod IP", []string{"--lease-name=a", "--route=endpointslice", "--service=s", "--pod-ip=::ffff:10.0.0.1"}, nil, "IPv4-mapped"},
		{"unparsable http address", []string{"--lease-name=a", "--http-address=999.999.999.999:80"}, nil, `invalid host "999.999.999.999"`},
		{"unresolvable http address", []string{"--lease-name=a", "--http-address=example.invalid:80"}, nil, "host names are not resolved"},
		{"negative zero port", []string{"--lease-name=a", "--probe-address=:-0"}, nil, `invalid port "-0"`},
		{"overlapping listen addresses", []string{"--lease-name=a", "--http-address=localhost:8080", "--probe-address=127.0.0.1:8080"}, nil, "would listen on the same port"},
		{"proxy on the probe port", []string{"--lease-name=a", "--proxy-address=:8080", "--proxy-upstream=127.0.0.1:5432"}, nil, `--proxy-address ":8080" and --probe-address ":8080" would listen on the same port`},
		{"proxy peer port on the API's", []string{"--lease-name=a", "--proxy-address=:7000", "--proxy-upstream=127.0.0.1:5432", "--proxy-peer-address=localhost:4040"}, nil, `--proxy-peer-address "localhost:4040" and --http-address "127.0.0.1:4040" would listen on the same port`},
		{"proxy upstream off the pod", []string{"--lease-name=a", "--proxy-address=:7000", "--proxy-upstream=10.0.0.5:5432"}, nil, "must be a loopback IP address"},
		{"misspelt variable", []string{"--lease-name=a"}, []string{"LEADER_ELECTOR_LEASE_DURATON=60s"}, "unknown environment variable LEADER_ELECTOR_LEASE_DURATON (did you mean LEADER_ELECTOR_LEASE_DURATION?)"},
		{"terminal escape in an argument", []string{"--lease-name=a", "stray\r\x1b[2J"}, nil, `unexpected arguments: stray\r\x1b[2J`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.args...)
			cmd.Env = append(harness.CleanEnv(), tc.env...)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			exit, ok := err.(*exec.ExitError)
			if !ok || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v, want code 2; stderr %q", err, stderr.String())
			}
			if n := strings.Count(stderr.String(), "\n"); n != 1 {
				t.Errorf("stderr has %d lines, want 1: %q", n, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
			if strings.ContainsAny(strings.TrimSuffix(stderr.String(), "\n"), "\r\x1b\n") {
				t.Errorf("stderr %q is not one printable line", stderr.String())
			}
		})
	}
}

// TestEnvironmentAndAliases: every flag can come from LEADER_ELECTOR_*, the
// retired image's aliases work and are logged as deprecated, the JSON log
// format is JSON, and --readiness=candidate makes a follower ready.
func TestEnvironmentAndAliases(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	ports := harnesstest.FreePorts(t, 2)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	byEnv := startCandidate(t, "by-env", candidateOptions{
		bareArgs: true,
		ports:    ports,
		env: append(harness.CleanEnv(),
			"LEADER_ELECTOR_LEASE_NAME="+lease,
			"LEADER_ELECTOR_LEASE_NAMESPACE=default",
			"LEADER_ELECTOR_IDENTITY=by-env",
			"LEADER_ELECTOR_KUBECONFIG="+controlPlane.AdminKubeconfig(),
			"LEADER_ELECTOR_LEASE_DURATION="+leaseDuration.String(),
			"LEADER_ELECTOR_RENEW_DEADLINE="+renewDeadline.String(),
			"LEADER_ELECTOR_RETRY_PERIOD="+retryPeriod.String(),
			fmt.Sprintf("LEADER_ELECTOR_HTTP_ADDRESS=127.0.0.1:%d", ports[0]),
			fmt.Sprintf("LEADER_ELECTOR_PROBE_ADDRESS=127.0.0.1:%d", ports[1]),
			"LEADER_ELECTOR_READINESS=candidate",
			"LEADER_ELECTOR_RELEASE_ON_SHUTDOWN=false",
			"LEADER_ELECTOR_KUBE_API_QPS=20",
			"LEADER_ELECTOR_KUBE_API_BURST=40",
			"LEADER_ELECTOR_LOG_FORMAT=json",
			"LEADER_ELECTOR_V=2",
		),
	})
	g.Add(byEnv)
	aliasPorts := harnesstest.FreePorts(t, 2)
	byAlias := startCandidate(t, "by-alias", candidateOptions{
		bareArgs: true,
		ports:    aliasPorts,
		extraArgs: []string{
			"--election=" + lease,
			"--election-namespace=default",
			"--id=by-alias",
			fmt.Sprintf("--http=127.0.0.1:%d", aliasPorts[0]),
			fmt.Sprintf("--probe-address=127.0.0.1:%d", aliasPorts[1]),
			"--kubeconfig=" + controlPlane.AdminKubeconfig(),
			"--lease-duration=" + leaseDuration.String(),
			"--renew-deadline=" + renewDeadline.String(),
			"--retry-period=" + retryPeriod.String(),
			"--readiness=candidate",
		},
		env: harness.CleanEnv(),
	})
	g.Add(byAlias)
	leader := g.WaitLeader(giveUp)

	for _, c := range []*candidate{byEnv, byAlias} {
		s, err := c.state()
		if err != nil {
			t.Fatal(err)
		}
		if s.Identity != c.name || s.Lease.Name != lease || s.Lease.Namespace != "default" {
			t.Errorf("%s: configuration not applied: %+v", c.name, s)
		}
		// Both become ready in candidate mode, leader or not.
		err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			code, _, _ := c.probe("/readyz")
			return code == 200, nil
		})
		if err != nil {
			code, body, _ := c.probe("/readyz")
			t.Errorf("%s: /readyz = %d %q in candidate mode", c.name, code, body)
		}
	}
	for _, alias := range []string{"--election", "--election-namespace", "--id", "--http"} {
		if !logHas(byAlias.log(), `"Flag is deprecated"`, `flag="`+alias+`"`) {
			t.Errorf("deprecated alias %s not logged; log:\n%s", alias, byAlias.log())
		}
	}
	// Every line of the JSON-format log is a JSON object.
	sc := bufio.NewScanner(strings.NewReader(byEnv.log()))
	lines := 0
	for sc.Scan() {
		lines++
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
		}
	}
	if lines == 0 {
		t.Errorf("no log lines in JSON format")
	}
	// With LEADER_ELECTOR_RELEASE_ON_SHUTDOWN=false the Lease is left to
	// expire: the Lease still names by-env after it exits.
	if leader == byEnv {
		byEnv.signal(syscall.SIGTERM)
		if code, err := byEnv.waitExit(giveUp); err != nil || code != 0 {
			t.Fatalf("exit %d %v", code, err)
		}
		l, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), lease, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if *l.Spec.HolderIdentity != "by-env" {
			t.Errorf("release-on-shutdown=false released the Lease: holder %q", *l.Spec.HolderIdentity)
		}
	}
}

// logHas reports whether one line of log contains all parts.
func logHas(log string, parts ...string) bool {
	for _, line := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestBadRequests: the application API answers bad requests with a fitting
// status and a JSON error.
func TestBadRequests(t *testing.T) {
	t.Parallel()
	c := startCandidate(t, "requests", candidateOptions{lease: leaseName(t)})
	cases := []struct {
		method, path string
		header       map[string]string
		status       int
		allow        string
	}{
		{"GET", "/nope", nil, http.StatusNotFound, ""},
		{"GET", "/leader/extra", nil, http.StatusNotFound, ""},
		{"POST", "/leader", nil, http.StatusMethodNotAllowed, "GET"},
		{"DELETE", "/", nil, http.StatusMethodNotAllowed, "GET"},
		{"GET", "/release", nil, http.StatusMethodNotAllowed, "POST"},
		{"GET", "/leader?wait=forever", nil, http.StatusBadRequest, ""},
		{"GET", "/leader?wait=-1s", nil, http.StatusBadRequest, ""},
		{"GET", "/leader?revision=-3", nil, http.StatusBadRequest, ""},
		{"GET", "/leader?revision=abc&wait=1s", nil, http.StatusBadRequest, ""},
		{"GET", "/leader?color=blue", nil, http.StatusBadRequest, ""},
		{"GET", "/leader", map[string]string{"Accept": "image/png"}, http.StatusNotAcceptable, ""},
		// Malformed query strings (issue 11, section 4).
		{"GET", "/leader?%zz", nil, http.StatusBadRequest, ""},
		{"GET", "/?%zz=1", nil, http.StatusBadRequest, ""},
		{"GET", "/leader?wait=1ms;revision=1", nil, http.StatusBadRequest, ""},
		{"GET", "/events?%", nil, http.StatusBadRequest, ""},
	}
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			code, header, body, err := c.do(tc.method, tc.path, tc.header)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.status {
				t.Errorf("status %d, want %d (%s)", code, tc.status, body)
			}
			var e map[string]string
			if header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &e) != nil || e["error"] == "" {
				t.Errorf("not a JSON error: %s %q", header.Get("Content-Type"), body)
			}
			if tc.allow != "" && header.Get("Allow") != tc.allow {
				t.Errorf("Allow = %q, want %q", header.Get("Allow"), tc.allow)
			}
		})
	}
	// POST /release with a malformed query string is refused before the
	// leader does anything: it still leads, with the same fencing token.
	t.Run("POST /release?% releases nothing", func(t *testing.T) {
		var before api.Leader
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			s, err := c.state()
			before = s
			return err == nil && s.IsLeader, nil
		})
		if err != nil {
			t.Fatalf("the only candidate never led: %+v", before)
		}
		code, _, body, err := c.do("POST", "/release?%", nil)
		if err != nil || code != http.StatusBadRequest {
			t.Fatalf("POST /release?%% = %d %s %v, want 400", code, body, err)
		}
		after, err := c.state()
		if err != nil {
			t.Fatal(err)
		}
		if !after.IsLeader || after.FencingToken != before.FencingToken {
			t.Errorf("after POST /release?%%: %+v, want still leading with fencing token %d", after, before.FencingToken)
		}
	})
}

// TestRuntimeErrorsExitOne: a configuration that parses but cannot work
// exits 1 with the reason logged: no usable client configuration, a port
// already in use.
func TestRuntimeErrorsExitOne(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no client configuration", []string{"--lease-name=a", "--http-address=127.0.0.1:0", "--probe-address=127.0.0.1:0"}, "no usable client configuration"},
		{"missing kubeconfig file", []string{"--lease-name=a", "--kubeconfig=/nonexistent/kubeconfig"}, "no usable client configuration"},
		{"port in use", []string{"--lease-name=a", "--kubeconfig=" + controlPlane.AdminKubeconfig(), "--http-address=" + busy.Addr().String(), "--probe-address=127.0.0.1:0"}, "address already in use"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.args...)
			// Outside a pod: no in-cluster configuration, no KUBECONFIG. The
			// identity is given: the machine's hostname need not be a pod name.
			cmd.Env = append(harness.CleanEnv(), "GORACE=atexit_sleep_ms=0", "POD_NAME=runtime-error")
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			exit, ok := err.(*exec.ExitError)
			if !ok || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want code 1; stderr %q", err, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr does not mention %q: %q", tc.want, stderr.String())
			}
		})
	}
}
