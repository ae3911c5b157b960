package options

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2/textlogger"

	"github.com/leader-elector/leader-elector/leasetimings"
)

// TestTTL: the retired image's --ttl sets the lease duration and derives the
// other two timings unless they are given; a conflict or an unsupported ttl
// is one clear error.
func TestTTL(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		vars        map[string]string
		lease       time.Duration
		renew       time.Duration
		retry       time.Duration
		wantDerived []string
		wantErr     string
	}{
		{name: "the old image's default", args: []string{"--ttl=10s"},
			lease: 10 * time.Second, renew: 6666 * time.Millisecond, retry: 1333 * time.Millisecond, wantDerived: []string{"renew-deadline", "retry-period"}},
		{name: "the defaults' own lease duration gives the defaults", args: []string{"--ttl=15s"},
			lease: 15 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second, wantDerived: []string{"renew-deadline", "retry-period"}},
		{name: "from the environment", vars: map[string]string{"LEADER_ELECTOR_TTL": "30s"},
			lease: 30 * time.Second, renew: 20 * time.Second, retry: 4 * time.Second, wantDerived: []string{"renew-deadline", "retry-period"}},
		{name: "an explicit renew deadline wins", args: []string{"--ttl=10s", "--renew-deadline=8s"},
			lease: 10 * time.Second, renew: 8 * time.Second, retry: 1333 * time.Millisecond, wantDerived: []string{"retry-period"}},
		{name: "an explicit retry period from the environment wins", args: []string{"--ttl=10s"}, vars: map[string]string{"LEADER_ELECTOR_RETRY_PERIOD": "1s"},
			lease: 10 * time.Second, renew: 6666 * time.Millisecond, retry: time.Second, wantDerived: []string{"renew-deadline"}},
		{name: "an equal --lease-duration is no conflict", args: []string{"--ttl=10s", "--lease-duration=10s"},
			lease: 10 * time.Second, renew: 6666 * time.Millisecond, retry: 1333 * time.Millisecond, wantDerived: []string{"renew-deadline", "retry-period"}},
		{name: "the command line's --lease-duration wins over the environment's ttl", args: []string{"--lease-duration=20s"}, vars: map[string]string{"LEADER_ELECTOR_TTL": "10s"},
			lease: 20 * time.Second, renew: 10 * time.Second, retry: 2 * time.Second},
		{name: "a different --lease-duration conflicts", args: []string{"--ttl=10s", "--lease-duration=20s"},
			wantErr: `--lease-duration and its deprecated alias --ttl disagree ("20s", "10s"); give only --lease-duration`},
		{name: "fractions of seconds", args: []string{"--ttl=10500ms"}, wantErr: "--ttl 10.5s is not supported: want whole seconds from 2s to 24h"},
		{name: "too short", args: []string{"--ttl=1s"}, wantErr: "--ttl 1s is not supported"},
		{name: "zero", args: []string{"--ttl=0s"}, wantErr: "--ttl 0s is not supported"},
		{name: "too long", args: []string{"--ttl=25h"}, wantErr: "--ttl 25h0m0s is not supported"},
		{name: "not a duration", args: []string{"--ttl=ten"}, wantErr: `invalid argument "ten" for "--ttl"`},
		{name: "an explicit renew deadline is still checked", args: []string{"--ttl=10s", "--renew-deadline=10s"},
			wantErr: "--lease-duration (10s) must be greater than --renew-deadline (10s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(append([]string{"--lease-name=my-app"}, tc.args...), fakeEnv{vars: tc.vars, hostname: "host-1"}.environment())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				if n := errorCount(err); n != 1 {
					t.Errorf("%d errors, want 1: %v", n, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.LeaseDuration != tc.lease || o.RenewDeadline != tc.renew || o.RetryPeriod != tc.retry {
				t.Errorf("timings = %v/%v/%v, want %v/%v/%v", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod, tc.lease, tc.renew, tc.retry)
			}
			if !reflect.DeepEqual(o.ttlDerived, tc.wantDerived) {
				t.Errorf("derived = %q, want %q", o.ttlDerived, tc.wantDerived)
			}
		})
	}
}

// TestTTLRangeGivesValidTimings: every whole-second ttl the flag accepts
// derives timings the election accepts and the supported ranges hold,
// checked at and near both ends and at every second of the first hour.
func TestTTLRangeGivesValidTimings(t *testing.T) {
	var ttls []time.Duration
	for s := minLeaseDuration; s <= time.Hour; s += time.Second {
		ttls = append(ttls, s)
	}
	ttls = append(ttls, maxTiming-time.Second, maxTiming)
	for _, ttl := range ttls {
		renew, retry := ttlTimings(ttl)
		o := newOptions()
		o.LeaseName, o.LeaseNamespace, o.Identity = "x", "default", "pod-a"
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = ttl, renew, retry
		if errs := append(o.timings().Check(leasetimings.FlagTimingNames), o.validateInputs()...); len(errs) > 0 {
			t.Fatalf("--ttl=%v derives %v/%v, refused: %v", ttl, renew, retry, errs)
		}
	}
}

func TestUseClusterCredentials(t *testing.T) {
	for _, args := range [][]string{{"--use-cluster-credentials"}, {"--use-cluster-credentials=true"}, {"--use-cluster-credentials=false"}} {
		o, _, err := parse(append([]string{"--lease-name=my-app"}, args...), plainEnv.environment())
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if !reflect.DeepEqual(o.noOps, []string{"use-cluster-credentials"}) {
			t.Errorf("%q: noOps = %q", args, o.noOps)
		}
		if o.Kubeconfig != "" {
			t.Errorf("%q: the kubeconfig changed to %q", args, o.Kubeconfig)
		}
	}
	if _, _, err := parse([]string{"--lease-name=my-app", "--use-cluster-credentials=maybe"}, plainEnv.environment()); err == nil {
		t.Error("--use-cluster-credentials=maybe accepted")
	}
}

func TestAPIExposed(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:4040": false,
		"localhost:4040": false,
		"[::1]:4040":     false,
		"127.0.0.2:4040": false,
		"0.0.0.0:4040":   true,
		":4040":          true,
		"[::]:4040":      true,
		"10.0.0.7:4040":  true,
	} {
		o := &Options{HTTPAddress: addr}
		if got := o.apiExposed(); got != want {
			t.Errorf("apiExposed(%q) = %v, want %v", addr, got, want)
		}
	}
}

// TestContribNotices: what a contrib-style command line logs.
func TestContribNotices(t *testing.T) {
	o, _, err := parse([]string{"--election=my-app", "--id=pod-a", "--ttl=10s", "--http=0.0.0.0:4040", "--use-cluster-credentials"}, plainEnv.environment())
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	o.LogNotices(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf))))
	for _, want := range [][]string{
		{`"Flag is deprecated"`, `flag="--ttl"`, `leaseDuration="10s"`, `renewDeadline="6.666s"`, `retryPeriod="1.333s"`, `derivedFromTTL=["--renew-deadline","--retry-period"]`},
		{`"Flag is deprecated and has no effect"`, `flag="--use-cluster-credentials"`, `credentials="in-cluster`},
		{`non-loopback address`, `POST /release`, `httpAddress="0.0.0.0:4040"`},
		{`"Flag is deprecated"`, `flag="--http"`},
	} {
		found := false
		for _, line := range strings.Split(buf.String(), "\n") {
			all := true
			for _, part := range want {
				all = all && strings.Contains(line, part)
			}
			found = found || all
		}
		if !found {
			t.Errorf("no log line with %q in:\n%s", want, buf.String())
		}
	}

	quiet, _, err := parse([]string{"--lease-name=my-app"}, plainEnv.environment())
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	quiet.LogNotices(textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&buf))))
	if buf.Len() > 0 {
		t.Errorf("the defaults log notices:\n%s", buf.String())
	}
}
