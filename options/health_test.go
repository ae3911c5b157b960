package options

import (
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/health"
)

func TestHealthOptions(t *testing.T) {
	o, _, err := parse([]string{"--lease-name=my-app", "--identity=pod-a", "--app-health-url=http://127.0.0.1:8081/healthz", "--app-health-period=500ms", "--app-health-failures=2", "--app-health-successes=4"}, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	got := o.AppConfig("test", "").Health
	want := health.Config{URL: "http://127.0.0.1:8081/healthz", Period: 500 * time.Millisecond, Failures: 2, Successes: 4,
		Namespace: "default", Lease: "my-app", Identity: "pod-a", LeaseDuration: 15 * time.Second}
	if got != want {
		t.Errorf("health config = %+v, want %+v", got, want)
	}
	if got.CandidatesLease() != "my-app-candidates" {
		t.Errorf("candidates lease = %q", got.CandidatesLease())
	}

	o, _, err = parse([]string{"--lease-name=my-app"}, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if o.AppConfig("test", "").Health.Enabled() {
		t.Error("health gating is on without --app-health-url")
	}

	// --name-successor alone: the candidates Lease without an app.
	o, _, err = parse([]string{"--lease-name=my-app", "--identity=pod-a", "--name-successor", "--revision=abc"}, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	got = o.AppConfig("test", "").Health
	want = health.Config{NameSuccessor: true, Period: 2 * time.Second, Failures: 3, Successes: 1,
		Namespace: "default", Lease: "my-app", Identity: "pod-a", LeaseDuration: 15 * time.Second, Revision: "abc"}
	if got != want || !got.Enabled() {
		t.Errorf("--name-successor: health config = %+v, want %+v, enabled", got, want)
	}

	for _, url := range []string{"http://[::1]:1/", "http://127.0.0.2:65535/ready?x=1"} {
		if _, _, err := parse([]string{"--lease-name=my-app", "--app-health-url=" + url}, plainEnv.environment()); err != nil {
			t.Errorf("--app-health-url=%s: %v", url, err)
		}
	}
}

func TestHealthOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--app-health-url=https://127.0.0.1:8443/"}, "scheme http"},
		{[]string{"--app-health-url=http://10.0.0.1:80/"}, "loopback IP address"},
		{[]string{"--app-health-url=http://localhost:80/"}, "loopback IP address"},
		{[]string{"--app-health-url=http://169.254.169.254:80/latest"}, "loopback IP address"},
		{[]string{"--app-health-url=http://127.0.0.1/healthz"}, "needs a port"},
		{[]string{"--app-health-url=http://127.0.0.1:0/healthz"}, "needs a port"},
		{[]string{"--app-health-url=http://u:p@127.0.0.1:80/"}, "credentials"},
		{[]string{"--app-health-url=127.0.0.1:80"}, "--app-health-url"},
		{[]string{"--app-health-url=http://127.0.0.1:80/", "--check-pod-terminating", "--partitions=2"}, "--check-pod-terminating guards one election's terms; it cannot be combined with --partitions"},
		{[]string{"--app-health-url=http://127.0.0.1:80/", "--revision=a", "--handover-to-newer-revision=5s", "--partitions=2"}, "--handover-to-newer-revision hands one election over; it cannot be combined with --partitions"},
		{[]string{"--check-pod-terminating"}, "--check-pod-terminating guards the terms of a candidate with --app-health-url or --name-successor"},
		{[]string{"--name-successor", "--partitions=2"}, "--name-successor names one election's successor; it cannot be combined with --partitions"},
		{[]string{"--name-successor", "--candidate=false", "--readiness=candidate"}, "--name-successor publishes this pod as a candidate, and --candidate=false is none"},
		{[]string{"--name-successor", "--lease-name=" + strings.Repeat("a", 250)}, "too long for --name-successor"},
		{[]string{"--app-health-period=99ms"}, "--app-health-period 99ms is outside the supported range 100ms..5m"},
		{[]string{"--app-health-period=6m"}, "outside the supported range"},
		{[]string{"--app-health-failures=0"}, "--app-health-failures must be within 1..100, got 0"},
		{[]string{"--app-health-successes=101"}, "--app-health-successes must be within 1..100, got 101"},
		{[]string{"--app-health-url=http://127.0.0.1:80/", "--lease-name=" + strings.Repeat("a", 250)}, "too long for health gating"},
		{[]string{"--revision=not/a label"}, "--revision \"not/a label\" is not a label value"},
		{[]string{"--revision=" + strings.Repeat("a", 64)}, "is not a label value"},
		{[]string{"--handover-to-newer-revision=-1s"}, "--handover-to-newer-revision -1s is outside the supported range 0s..10m"},
		{[]string{"--handover-to-newer-revision=11m"}, "outside the supported range 0s..10m"},
	} {
		args := append([]string{"--lease-name=my-app"}, tc.args...)
		_, _, err := parse(args, plainEnv.environment())
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%v: err = %v, want it to say %q", tc.args, err, tc.wantErr)
			continue
		}
		if n := errorCount(err); n != 1 {
			t.Errorf("%v: %d errors, want 1: %v", tc.args, n, err)
		}
	}
}

// TestRevisionFromPodLabels: --revision wins; without it the pod's
// pod-template-hash, else its controller-revision-hash (the chart passes
// both through the downward API; one of them is empty).
func TestRevisionFromPodLabels(t *testing.T) {
	for _, tc := range []struct {
		args []string
		vars map[string]string
		want string
	}{
		{nil, nil, ""},
		{nil, map[string]string{"POD_TEMPLATE_HASH": "5d8f7c9b4", "CONTROLLER_REVISION_HASH": ""}, "5d8f7c9b4"},
		{nil, map[string]string{"POD_TEMPLATE_HASH": "", "CONTROLLER_REVISION_HASH": "web-6b7f"}, "web-6b7f"},
		{[]string{"--revision=v2"}, map[string]string{"POD_TEMPLATE_HASH": "5d8f7c9b4"}, "v2"},
	} {
		env := fakeEnv{vars: tc.vars, hostname: "pod-a"}
		args := append([]string{"--lease-name=my-app", "--app-health-url=http://127.0.0.1:8081/"}, tc.args...)
		o, _, err := parse(args, env.environment())
		if err != nil {
			t.Fatalf("%v %v: %v", tc.args, tc.vars, err)
		}
		if got := o.AppConfig("test", "").Health.Revision; got != tc.want {
			t.Errorf("%v %v: revision %q, want %q", tc.args, tc.vars, got, tc.want)
		}
	}
}
