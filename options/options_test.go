package options

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/leasetimings"
)

// fakeEnv is the surroundings parseOptions sees in a test.
type fakeEnv struct {
	vars     map[string]string
	files    map[string]string
	hostname string
	hostErr  error
}

func (f fakeEnv) environment() Environment {
	return Environment{
		lookupEnv: func(name string) (string, bool) {
			v, ok := f.vars[name]
			return v, ok
		},
		readFile: func(path string) ([]byte, error) {
			if c, ok := f.files[path]; ok {
				return []byte(c), nil
			}
			return nil, fs.ErrNotExist
		},
		hostname: func() (string, error) {
			if f.hostErr != nil {
				return "", f.hostErr
			}
			return f.hostname, nil
		},
		environ: func() []string {
			all := make([]string, 0, len(f.vars))
			for k, v := range f.vars {
				all = append(all, k+"="+v)
			}
			return all
		},
	}
}

// plainEnv has a hostname and nothing else.
var plainEnv = fakeEnv{hostname: "host-1"}

// errorCount is the number of errors joined in err.
func errorCount(err error) int {
	if err == nil {
		return 0
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return len(j.Unwrap())
	}
	return 1
}

func TestParseOptionsDefaults(t *testing.T) {
	o, _, err := parse([]string{"--lease-name=my-app"}, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := &Options{
		LeaseName:         "my-app",
		LeaseNamespace:    "default",
		Identity:          "host-1",
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		HTTPAddress:       "127.0.0.1:4040",
		ProbeAddress:      ":8080",
		Readiness:         "leader",
		ReleaseOnShutdown: true,
		Events:            true,
		LogFormat:         "text",
		DrainTimeout:      10 * time.Second,
		Routing:           routeOptions{Mode: "none", LeaderLabel: "leader-elector.io/leader"},
		Health:            healthOptions{Period: 2 * time.Second, Failures: 3, Successes: 1},
		Campaign:          campaignOptions{Campaign: "auto", AcquireRetries: 3, AcquireRetryDelay: 500 * time.Millisecond, Candidate: true},
		Notify:            notifyOptions{Timeout: 2 * time.Second, Retries: 3},
		// The proxy is off; its wait defaults to the renew deadline.
		Proxy: proxyOptions{PeerAddress: ":4041", MaxConnections: 1024, Wait: 10 * time.Second, ShutdownDelay: 5 * time.Second},
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("parse() =\n%+v\nwant\n%+v", o, want)
	}
	wantCfg := election.Config{
		LeaseSpec: election.LeaseSpec{
			Namespace:         "default",
			Name:              "my-app",
			Identity:          "host-1",
			Timings:           leasetimings.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
			ReleaseOnShutdown: true,
		},
		Campaign: election.CampaignAuto,
		// No $KUBERNETES_SERVICE_HOST: not in a pod.
		AllowLoopbackAddress: true,
	}
	if got := o.electionConfig(); !reflect.DeepEqual(got, wantCfg) {
		t.Errorf("electionConfig() = %+v, want %+v", got, wantCfg)
	}
}

func TestParseOptionsFlags(t *testing.T) {
	args := []string{
		"--lease-name=my-app",
		"--lease-namespace=team-a",
		"--identity=pod-a",
		"--lease-duration=20s",
		"--renew-deadline=12s",
		"--retry-period=3s",
		"--http-address=127.0.0.1:5050",
		"--probe-address=:9090",
		"--readiness=candidate",
		"--release-on-shutdown=false",
		"--events=false",
		"--kubeconfig=/tmp/kubeconfig",
		"--kube-api-qps=7.5",
		"--kube-api-burst=15",
		"--log-format=json",
	}
	o, _, err := parse(args, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := &Options{
		LeaseName:         "my-app",
		LeaseNamespace:    "team-a",
		Identity:          "pod-a",
		LeaseDuration:     20 * time.Second,
		RenewDeadline:     12 * time.Second,
		RetryPeriod:       3 * time.Second,
		HTTPAddress:       "127.0.0.1:5050",
		ProbeAddress:      ":9090",
		Readiness:         "candidate",
		ReleaseOnShutdown: false,
		Kubeconfig:        "/tmp/kubeconfig",
		KubeAPIQPS:        7.5,
		KubeAPIBurst:      15,
		LogFormat:         "json",
		DrainTimeout:      10 * time.Second,
		Routing:           newRouteOptions(),
		Health:            newHealthOptions(),
		Campaign:          newCampaignOptions(),
		Notify:            newNotifyOptions(),
		Proxy:             proxyOptions{PeerAddress: ":4041", MaxConnections: 1024, Wait: 12 * time.Second, ShutdownDelay: 5 * time.Second},
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("parse() =\n%+v\nwant\n%+v", o, want)
	}
}

func TestParseOptionsVerbosity(t *testing.T) {
	// -v is klog's global verbosity: put it back afterwards.
	t.Cleanup(func() {
		if _, _, err := parse([]string{"-v=0", "--lease-name=x"}, plainEnv.environment()); err != nil {
			t.Errorf("resetting -v: %v", err)
		}
	})
	_, fs, err := parse([]string{"-v=3", "--lease-name=my-app"}, plainEnv.environment())
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := verbosity(fs); got != 3 {
		t.Errorf("verbosity = %d, want 3", got)
	}
	if o, err := Parse([]string{"-v=2", "--lease-name=my-app"}, plainEnv.environment()); err != nil || o.Verbosity != 2 {
		t.Errorf("Parse(-v=2): Verbosity %v, error %v; want 2", o, err)
	}
	// klog's other flags are not part of the contract.
	for _, name := range []string{"logtostderr", "log_file", "alsologtostderr", "skip_headers"} {
		if fs.Lookup(name) != nil {
			t.Errorf("klog flag --%s is exposed", name)
		}
	}
}

func TestParseOptionsValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  fakeEnv
		// wantErr are substrings of the error; each case breaks exactly
		// one rule unless it says so.
		wantErr   []string
		wantCount int
	}{
		{name: "missing lease name", args: []string{}, wantErr: []string{"--lease-name is required"}},
		{name: "empty lease name", args: []string{"--lease-name="}, wantErr: []string{"--lease-name is required"}},
		{name: "upper case lease name", args: []string{"--lease-name=MyApp"}, wantErr: []string{`--lease-name "MyApp" is not a valid DNS-1123 subdomain`}},
		{name: "lease name with underscore", args: []string{"--lease-name=my_app"}, wantErr: []string{"DNS-1123 subdomain"}},
		{name: "lease name too long", args: []string{"--lease-name=" + strings.Repeat("a", 254)}, wantErr: []string{"DNS-1123 subdomain"}},
		{name: "invalid namespace", args: []string{"--lease-name=my-app", "--lease-namespace=Team_A"}, wantErr: []string{`--lease-namespace "Team_A" is not a valid namespace`}},
		{name: "dotted namespace", args: []string{"--lease-name=my-app", "--lease-namespace=team.a"}, wantErr: []string{"--lease-namespace"}},
		{name: "invalid namespace from the environment", args: []string{"--lease-name=my-app"}, env: fakeEnv{hostname: "h", vars: map[string]string{"POD_NAMESPACE": "Bad"}}, wantErr: []string{`--lease-namespace "Bad"`}},
		{name: "blank identity", args: []string{"--lease-name=my-app", "--identity= "}, wantErr: []string{"--identity is empty"}},
		{name: "no identity available", args: []string{"--lease-name=my-app"}, env: fakeEnv{hostErr: errors.New("no hostname")}, wantErr: []string{"--identity is empty"}},
		{name: "negative partitions", args: []string{"--lease-name=my-app", "--partitions=-1"}, wantErr: []string{"--partitions must be within 0..1024 (0: leader election), got -1"}},
		{name: "too many partitions", args: []string{"--lease-name=my-app", "--partitions=1025"}, wantErr: []string{"--partitions must be within 0..1024"}},
		{name: "partitions not a number", args: []string{"--lease-name=my-app", "--partitions=four"}, wantErr: []string{"--partitions"}},
		{name: "negative drain timeout", args: []string{"--lease-name=my-app", "--partitions=4", "--drain-timeout=-1s"}, wantErr: []string{"--drain-timeout must be within 0s..10m0s (0: hand partitions over at once), got -1s"}},
		{name: "drain timeout too long", args: []string{"--lease-name=my-app", "--partitions=4", "--drain-timeout=11m"}, wantErr: []string{"--drain-timeout must be within 0s..10m0s"}},
		{name: "drain timeout without partitions", args: []string{"--lease-name=my-app", "--drain-timeout=5s"}, wantErr: []string{"--drain-timeout is for partition mode"}},
		{name: "partition group name too long for a label", args: []string{"--lease-name=" + strings.Repeat("a", 64), "--partitions=4"}, wantErr: []string{"longer than 63 characters, the most partition mode allows"}},
		{name: "lease duration equal to renew deadline", args: []string{"--lease-name=my-app", "--lease-duration=10s"}, wantErr: []string{"--lease-duration (10s) must be greater than --renew-deadline (10s)"}},
		{name: "lease duration below renew deadline", args: []string{"--lease-name=my-app", "--renew-deadline=20s"}, wantErr: []string{"must be greater than --renew-deadline"}},
		{name: "client rate beyond the bound", args: []string{"--lease-name=my-app", "--kube-api-qps=1e9"}, wantErr: []string{"--kube-api-qps 1e+09 is outside the supported range 0..10000 (0: the default)"}},
		{name: "client burst beyond the bound", args: []string{"--lease-name=my-app", "--kube-api-burst=20001"}, wantErr: []string{"--kube-api-burst 20001 is outside the supported range 0..20000 (0: the default)"}},
		{name: "lease duration 10 ms above renew deadline", args: []string{"--lease-name=my-app", "--lease-duration=15s", "--renew-deadline=14990ms", "--retry-period=100ms"}, wantErr: []string{"--lease-duration (15s) must exceed --renew-deadline (14.99s) by at least 1s"}},
		{name: "lease duration less than 1% above renew deadline", args: []string{"--lease-name=my-app", "--lease-duration=24h", "--renew-deadline=85537s", "--retry-period=1h"}, wantErr: []string{"must exceed --renew-deadline (23h45m37s) by at least 1h0m0s"}},
		{name: "lease duration less than a retry period above renew deadline", args: []string{"--lease-name=my-app", "--lease-duration=15s", "--renew-deadline=12s", "--retry-period=3500ms"}, wantErr: []string{"must exceed --renew-deadline (12s) by at least 3.5s (the largest of 1s, 1% of --lease-duration and --retry-period)"}},
		{name: "renew deadline equal to retry period × 1.2", args: []string{"--lease-name=my-app", "--lease-duration=25s", "--renew-deadline=12s", "--retry-period=10s"}, wantErr: []string{"--renew-deadline (12s) must be greater than --retry-period × 1.2"}},
		{name: "renew deadline below retry period × 1.2", args: []string{"--lease-name=my-app", "--lease-duration=20s", "--retry-period=9s"}, wantErr: []string{"--retry-period × 1.2"}},
		{name: "zero lease duration", args: []string{"--lease-name=my-app", "--lease-duration=0"}, wantErr: []string{"--lease-duration must be positive"}},
		{name: "negative renew deadline", args: []string{"--lease-name=my-app", "--renew-deadline=-1s"}, wantErr: []string{"--renew-deadline must be positive"}},
		{name: "zero retry period", args: []string{"--lease-name=my-app", "--retry-period=0s"}, wantErr: []string{"--retry-period must be positive"}},
		{name: "fractional lease duration", args: []string{"--lease-name=my-app", "--lease-duration=15500ms"}, wantErr: []string{"--lease-duration 15.5s is not a whole number of seconds"}},
		{name: "sub-second lease duration", args: []string{"--lease-name=my-app", "--lease-duration=20s1ns"}, wantErr: []string{"not a whole number of seconds"}},
		{name: "http address without port", args: []string{"--lease-name=my-app", "--http-address=localhost"}, wantErr: []string{`--http-address "localhost"`}},
		{name: "http address with named port", args: []string{"--lease-name=my-app", "--http-address=localhost:http"}, wantErr: []string{`--http-address "localhost:http": invalid port`}},
		{name: "http address with port out of range", args: []string{"--lease-name=my-app", "--http-address=:65536"}, wantErr: []string{"invalid port"}},
		{name: "http address with a URL", args: []string{"--lease-name=my-app", "--http-address=http://localhost:4040"}, wantErr: []string{"--http-address"}},
		{name: "probe address empty", args: []string{"--lease-name=my-app", "--probe-address="}, wantErr: []string{`--probe-address ""`}},
		{name: "probe address with a path", args: []string{"--lease-name=my-app", "--probe-address=/tmp/sock:1"}, wantErr: []string{"invalid host"}},
		{name: "same http and probe address", args: []string{"--lease-name=my-app", "--http-address=:8080"}, wantErr: []string{`would listen on the same port`}},
		{name: "probe port overlaps a wildcard", args: []string{"--lease-name=my-app", "--http-address=127.0.0.1:8080"}, wantErr: []string{`would listen on the same port`}},
		{name: "unknown readiness", args: []string{"--lease-name=my-app", "--readiness=always"}, wantErr: []string{`--readiness "always" is unknown`}},
		{name: "unknown log format", args: []string{"--lease-name=my-app", "--log-format=xml"}, wantErr: []string{`--log-format "xml" is unknown`}},
		{name: "negative qps", args: []string{"--lease-name=my-app", "--kube-api-qps=-1"}, wantErr: []string{"--kube-api-qps must not be negative"}},
		{name: "negative burst", args: []string{"--lease-name=my-app", "--kube-api-burst=-1"}, wantErr: []string{"--kube-api-burst must not be negative"}},
		{name: "unknown campaign", args: []string{"--lease-name=my-app", "--campaign=never"}, wantErr: []string{`--campaign "never" is unknown (want "auto" or "manual")`}},
		{name: "zero acquire retries", args: []string{"--lease-name=my-app", "--acquire-retries=0"}, wantErr: []string{"--acquire-retries must be within 1..100, got 0"}},
		{name: "too many acquire retries", args: []string{"--lease-name=my-app", "--acquire-retries=101"}, wantErr: []string{"--acquire-retries must be within 1..100"}},
		{name: "negative acquire retry delay", args: []string{"--lease-name=my-app", "--acquire-retry-delay=-1s"}, wantErr: []string{"--acquire-retry-delay must be within 0s..1m0s, got -1s"}},
		{name: "acquire retry delay too long", args: []string{"--lease-name=my-app", "--acquire-retry-delay=61s"}, wantErr: []string{"--acquire-retry-delay must be within"}},
		{name: "acquire attempts outlast a call", args: []string{"--lease-name=my-app", "--acquire-retries=100", "--acquire-retry-delay=10s"}, wantErr: []string{"100 attempts 10s apart take 16m30s, more than the 5m0s one call may take"}},
		{name: "manual campaign with partitions", args: []string{"--lease-name=my-app", "--partitions=4", "--campaign=manual"}, wantErr: []string{"--campaign=manual is for leader election"}},
		{name: "observer with manual campaign", args: []string{"--lease-name=my-app", "--candidate=false", "--campaign=manual"}, wantErr: []string{"--candidate=false never does; give one of them"}},
		{name: "observer with partitions", args: []string{"--lease-name=my-app", "--candidate=false", "--partitions=4"}, wantErr: []string{"--candidate=false is for leader election"}},
		{name: "observer with leader readiness", args: []string{"--lease-name=my-app", "--candidate=false", "--readiness=leader"}, wantErr: []string{"--readiness=leader would never pass with --candidate=false"}},
		{name: "observer with routing", args: []string{"--lease-name=my-app", "--candidate=false", "--route=label"}, wantErr: []string{"--route=label publishes the leader this pod would be"}},
		{name: "observer with health gating", args: []string{"--lease-name=my-app", "--candidate=false", "--app-health-url=http://127.0.0.1:8081/healthz"}, wantErr: []string{"--app-health-url gates this pod's candidacy, and --candidate=false has none"}},
		{name: "observer advertising", args: []string{"--lease-name=my-app", "--candidate=false", "--advertise-port=8081", "--advertise-address=10.0.0.7"}, wantErr: []string{"--advertise-port publishes the address of the leader this pod would be"}},
		{name: "unknown flag", args: []string{"--lease-name=my-app", "--lease=x"}, wantErr: []string{"unknown flag: --lease"}},
		{name: "misspelt flag", args: []string{"--leese-name=my-app"}, wantErr: []string{"unknown flag: --leese-name (did you mean --lease-name?)"}},
		{name: "misspelt subcommand", args: []string{"stauts", "--lease-name=my-app"}, wantErr: []string{`unknown command "stauts" (did you mean "status"?)`}},
		{name: "a stray word close to a subcommand after the flags", args: []string{"--lease-name=my-app", "rum"}, wantErr: []string{"unexpected arguments: rum"}},
		{name: "unknown shorthand", args: []string{"--lease-name=my-app", "-x"}, wantErr: []string{"unknown shorthand flag"}},
		{name: "unparsable duration", args: []string{"--lease-name=my-app", "--retry-period=2"}, wantErr: []string{`"--retry-period"`}},
		{name: "unparsable bool", args: []string{"--lease-name=my-app", "--release-on-shutdown=maybe"}, wantErr: []string{"--release-on-shutdown"}},
		{name: "stray argument", args: []string{"--lease-name=my-app", "my-other-app"}, wantErr: []string{"unexpected arguments: my-other-app"}},
		{name: "stray arguments after --", args: []string{"--lease-name=my-app", "--", "a", "b"}, wantErr: []string{"unexpected arguments: a b"}},
		{
			name:      "all failures reported together",
			args:      []string{"--lease-name=My_App", "--lease-duration=1500ms", "--readiness=x", "--log-format=x", "--kube-api-qps=-1", "--kube-api-burst=-1"},
			wantErr:   []string{"DNS-1123", "whole number", "--renew-deadline", "outside the supported range", "--readiness", "--log-format", "--kube-api-qps", "--kube-api-burst"},
			wantCount: 8,
		},
		{
			name:      "relations skipped when a duration is not positive",
			args:      []string{"--lease-name=my-app", "--lease-duration=0", "--renew-deadline=0", "--retry-period=0"},
			wantErr:   []string{"--lease-duration must be positive", "--renew-deadline must be positive", "--retry-period must be positive"},
			wantCount: 3,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env
			if env.vars == nil && env.hostname == "" && env.hostErr == nil {
				env = plainEnv
			}
			o, _, err := parse(tc.args, env.environment())
			if err == nil {
				t.Fatalf("parse(%q) = %+v, want an error", tc.args, o)
			}
			if o != nil {
				t.Errorf("parseOptions returned options along with the error")
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			wantCount := tc.wantCount
			if wantCount == 0 {
				wantCount = 1
			}
			if got := errorCount(err); got != wantCount {
				t.Errorf("%d errors, want %d: %v", got, wantCount, err)
			}
		})
	}
}

func TestParseOptionsValidEdges(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "renew deadline just above retry period × 1.2", args: []string{"--renew-deadline=12001ms", "--retry-period=10s", "--lease-duration=23s"}},
		{name: "lease duration a second above renew deadline", args: []string{"--lease-duration=11s", "--renew-deadline=10s", "--retry-period=1s"}},
		{name: "lease duration 1% above renew deadline", args: []string{"--lease-duration=24h", "--renew-deadline=85536s", "--retry-period=1m"}},
		{name: "IPv6 address", args: []string{"--http-address=[::1]:4040"}},
		{name: "port 0", args: []string{"--http-address=127.0.0.1:0", "--probe-address=:0"}},
		{name: "zero qps and burst", args: []string{"--kube-api-qps=0", "--kube-api-burst=0"}},
		{name: "highest qps and burst", args: []string{"--kube-api-qps=10000", "--kube-api-burst=20000"}},
		{name: "dotted lease name", args: []string{"--lease-name=my-app.example.com"}},
		{name: "json logs", args: []string{"--log-format=json"}},
		{name: "candidate readiness", args: []string{"--readiness=candidate"}},
		{name: "one partition", args: []string{"--partitions=1"}},
		{name: "most partitions", args: []string{"--partitions=1024"}},
		{name: "no drain", args: []string{"--partitions=4", "--drain-timeout=0s"}},
		{name: "longest drain", args: []string{"--partitions=4", "--drain-timeout=10m"}},
		{name: "long lease name without partitions", args: []string{"--lease-name=" + strings.Repeat("a", 64)}},
		{name: "manual campaign", args: []string{"--campaign=manual"}},
		{name: "one acquire attempt without delay", args: []string{"--acquire-retries=1", "--acquire-retry-delay=0s"}},
		{name: "acquire attempts spanning a whole call", args: []string{"--acquire-retries=6", "--acquire-retry-delay=1m"}},
		{name: "observer", args: []string{"--candidate=false"}},
		{name: "observer with candidate readiness", args: []string{"--candidate=false", "--readiness=candidate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			if _, _, err := parse(args, plainEnv.environment()); err != nil {
				t.Errorf("parse(%q): %v", args, err)
			}
		})
	}
}

func TestParseOptionsEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		vars    map[string]string
		check   func(t *testing.T, o *Options)
		wantErr string
	}{
		{
			name: "drain timeout from the environment",
			vars: map[string]string{"LEADER_ELECTOR_LEASE_NAME": "env-app", "LEADER_ELECTOR_PARTITIONS": "4", "LEADER_ELECTOR_DRAIN_TIMEOUT": "3s"},
			check: func(t *testing.T, o *Options) {
				if o.DrainTimeout != 3*time.Second || o.partitionConfig().DrainTimeout != 3*time.Second {
					t.Errorf("drain timeout %v, partition config's %v; want 3s", o.DrainTimeout, o.partitionConfig().DrainTimeout)
				}
			},
		},
		{
			name:    "drain timeout from the environment without partitions",
			vars:    map[string]string{"LEADER_ELECTOR_LEASE_NAME": "env-app", "LEADER_ELECTOR_DRAIN_TIMEOUT": "3s"},
			wantErr: "--drain-timeout is for partition mode",
		},
		{
			name: "every flag from the environment",
			vars: map[string]string{
				"LEADER_ELECTOR_LEASE_NAME":          "env-app",
				"LEADER_ELECTOR_LEASE_NAMESPACE":     "env-ns",
				"LEADER_ELECTOR_IDENTITY":            "env-pod",
				"LEADER_ELECTOR_LEASE_DURATION":      "30s",
				"LEADER_ELECTOR_RENEW_DEADLINE":      "20s",
				"LEADER_ELECTOR_RETRY_PERIOD":        "5s",
				"LEADER_ELECTOR_HTTP_ADDRESS":        "127.0.0.1:1111",
				"LEADER_ELECTOR_PROBE_ADDRESS":       ":2222",
				"LEADER_ELECTOR_READINESS":           "candidate",
				"LEADER_ELECTOR_RELEASE_ON_SHUTDOWN": "false",
				"LEADER_ELECTOR_EVENTS":              "false",
				"LEADER_ELECTOR_KUBECONFIG":          "/env/kubeconfig",
				"LEADER_ELECTOR_KUBE_API_QPS":        "50",
				"LEADER_ELECTOR_KUBE_API_BURST":      "100",
				"LEADER_ELECTOR_LOG_FORMAT":          "json",
			},
			check: func(t *testing.T, o *Options) {
				want := &Options{
					LeaseName:         "env-app",
					LeaseNamespace:    "env-ns",
					Identity:          "env-pod",
					LeaseDuration:     30 * time.Second,
					RenewDeadline:     20 * time.Second,
					RetryPeriod:       5 * time.Second,
					HTTPAddress:       "127.0.0.1:1111",
					ProbeAddress:      ":2222",
					Readiness:         "candidate",
					ReleaseOnShutdown: false,
					Kubeconfig:        "/env/kubeconfig",
					KubeAPIQPS:        50,
					KubeAPIBurst:      100,
					LogFormat:         "json",
					DrainTimeout:      10 * time.Second,
					Routing:           newRouteOptions(),
					Health:            newHealthOptions(),
					Campaign:          newCampaignOptions(),
					Notify:            newNotifyOptions(),
					Proxy:             proxyOptions{PeerAddress: ":4041", MaxConnections: 1024, Wait: 20 * time.Second, ShutdownDelay: 5 * time.Second},
				}
				if !reflect.DeepEqual(o, want) {
					t.Errorf("got\n%+v\nwant\n%+v", o, want)
				}
			},
		},
		{
			name: "command line wins",
			args: []string{"--lease-name=cli-app", "--lease-duration=20s", "--release-on-shutdown=true"},
			vars: map[string]string{
				"LEADER_ELECTOR_LEASE_NAME":          "env-app",
				"LEADER_ELECTOR_LEASE_DURATION":      "not a duration",
				"LEADER_ELECTOR_RELEASE_ON_SHUTDOWN": "false",
			},
			check: func(t *testing.T, o *Options) {
				if o.LeaseName != "cli-app" || o.LeaseDuration != 20*time.Second || !o.ReleaseOnShutdown {
					t.Errorf("lease name, duration, release = %q, %v, %v; want the command line's", o.LeaseName, o.LeaseDuration, o.ReleaseOnShutdown)
				}
			},
		},
		{
			name:    "invalid duration names the variable",
			args:    []string{"--lease-name=my-app"},
			vars:    map[string]string{"LEADER_ELECTOR_LEASE_DURATION": "15"},
			wantErr: `invalid LEADER_ELECTOR_LEASE_DURATION="15"`,
		},
		{
			name:    "invalid bool names the variable",
			args:    []string{"--lease-name=my-app"},
			vars:    map[string]string{"LEADER_ELECTOR_RELEASE_ON_SHUTDOWN": "yes please"},
			wantErr: "LEADER_ELECTOR_RELEASE_ON_SHUTDOWN",
		},
		{
			name:    "invalid number names the variable",
			args:    []string{"--lease-name=my-app"},
			vars:    map[string]string{"LEADER_ELECTOR_KUBE_API_BURST": "lots"},
			wantErr: "LEADER_ELECTOR_KUBE_API_BURST",
		},
		{
			name:    "valid syntax, invalid value",
			vars:    map[string]string{"LEADER_ELECTOR_LEASE_NAME": "Not_Valid"},
			wantErr: "--lease-name",
		},
		{
			name: "deprecated alias from the environment",
			vars: map[string]string{"LEADER_ELECTOR_ELECTION": "old-app"},
			check: func(t *testing.T, o *Options) {
				if o.LeaseName != "old-app" {
					t.Errorf("LeaseName = %q, want old-app", o.LeaseName)
				}
				if !reflect.DeepEqual(o.deprecated, []string{"election"}) {
					t.Errorf("deprecated = %q, want [election]", o.deprecated)
				}
			},
		},
		{
			name: "unrelated variables and service links are ignored",
			args: []string{"--lease-name=my-app"},
			vars: map[string]string{"LEADER_ELECTOR_DEMO_SERVICE_HOST": "10.96.0.10", "LEASE_NAME": "other"},
			check: func(t *testing.T, o *Options) {
				if o.LeaseName != "my-app" {
					t.Errorf("LeaseName = %q, want my-app", o.LeaseName)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fakeEnv{vars: tc.vars, hostname: "host-1"}
			o, _, err := parse(tc.args, env.environment())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			tc.check(t, o)
		})
	}
}

func TestParseOptionsEnvironmentDefaults(t *testing.T) {
	const nsFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	for _, tc := range []struct {
		name           string
		args           []string
		env            fakeEnv
		wantNamespace  string
		wantIdentity   string
		wantKubeconfig string
	}{
		{
			name:          "nothing available",
			env:           fakeEnv{hostname: "host-1"},
			wantNamespace: "default",
			wantIdentity:  "host-1",
		},
		{
			name: "pod environment",
			env: fakeEnv{
				vars:     map[string]string{"POD_NAMESPACE": "team-a", "POD_NAME": "my-app-7d9f-abcde"},
				files:    map[string]string{nsFile: "team-b"},
				hostname: "host-1",
			},
			wantNamespace: "team-a",
			wantIdentity:  "my-app-7d9f-abcde",
		},
		{
			name: "service account namespace file",
			env: fakeEnv{
				files:    map[string]string{nsFile: "team-b\n"},
				hostname: "host-1",
			},
			wantNamespace: "team-b",
			wantIdentity:  "host-1",
		},
		{
			name: "empty POD_NAMESPACE and POD_NAME are ignored",
			env: fakeEnv{
				vars:     map[string]string{"POD_NAMESPACE": "", "POD_NAME": ""},
				files:    map[string]string{nsFile: "team-b"},
				hostname: "host-1",
			},
			wantNamespace: "team-b",
			wantIdentity:  "host-1",
		},
		{
			name: "blank namespace file",
			env: fakeEnv{
				files:    map[string]string{nsFile: " \n"},
				hostname: "host-1",
			},
			wantNamespace: "default",
			wantIdentity:  "host-1",
		},
		{
			name: "flags win over the pod environment",
			args: []string{"--lease-namespace=flag-ns", "--identity=flag-id", "--kubeconfig=/flag/kubeconfig"},
			env: fakeEnv{
				vars:     map[string]string{"POD_NAMESPACE": "team-a", "POD_NAME": "pod", "KUBECONFIG": "/env/kubeconfig"},
				files:    map[string]string{nsFile: "team-b"},
				hostname: "host-1",
			},
			wantNamespace:  "flag-ns",
			wantIdentity:   "flag-id",
			wantKubeconfig: "/flag/kubeconfig",
		},
		{
			name: "LEADER_ELECTOR_ variables win over the pod environment",
			env: fakeEnv{
				vars: map[string]string{
					"POD_NAMESPACE": "team-a", "POD_NAME": "pod", "KUBECONFIG": "/env/kubeconfig",
					"LEADER_ELECTOR_LEASE_NAMESPACE": "le-ns", "LEADER_ELECTOR_IDENTITY": "le-id", "LEADER_ELECTOR_KUBECONFIG": "/le/kubeconfig",
				},
				hostname: "host-1",
			},
			wantNamespace:  "le-ns",
			wantIdentity:   "le-id",
			wantKubeconfig: "/le/kubeconfig",
		},
		{
			name: "KUBECONFIG",
			env: fakeEnv{
				vars:     map[string]string{"KUBECONFIG": "/home/me/.kube/config"},
				hostname: "host-1",
			},
			wantNamespace:  "default",
			wantIdentity:   "host-1",
			wantKubeconfig: "/home/me/.kube/config",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			o, _, err := parse(args, tc.env.environment())
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if o.LeaseNamespace != tc.wantNamespace || o.Identity != tc.wantIdentity || o.Kubeconfig != tc.wantKubeconfig {
				t.Errorf("namespace, identity, kubeconfig = %q, %q, %q; want %q, %q, %q",
					o.LeaseNamespace, o.Identity, o.Kubeconfig, tc.wantNamespace, tc.wantIdentity, tc.wantKubeconfig)
			}
		})
	}
}

func TestParseOptionsDeprecatedAliases(t *testing.T) {
	for _, tc := range []struct {
		name           string
		args           []string
		want           func(o *Options) bool
		wantDeprecated []string
		wantErr        []string
	}{
		{
			name:           "--election",
			args:           []string{"--election=my-app"},
			want:           func(o *Options) bool { return o.LeaseName == "my-app" },
			wantDeprecated: []string{"election"},
		},
		{
			name:           "--election-namespace",
			args:           []string{"--lease-name=my-app", "--election-namespace=team-a"},
			want:           func(o *Options) bool { return o.LeaseNamespace == "team-a" },
			wantDeprecated: []string{"election-namespace"},
		},
		{
			name:           "--id",
			args:           []string{"--lease-name=my-app", "--id=pod-a"},
			want:           func(o *Options) bool { return o.Identity == "pod-a" },
			wantDeprecated: []string{"id"},
		},
		{
			name:           "--http with host and port",
			args:           []string{"--lease-name=my-app", "--http=0.0.0.0:4040"},
			want:           func(o *Options) bool { return o.HTTPAddress == "0.0.0.0:4040" },
			wantDeprecated: []string{"http"},
		},
		{
			name:           "--http with a bare port",
			args:           []string{"--lease-name=my-app", "--http=:4040"},
			want:           func(o *Options) bool { return o.HTTPAddress == ":4040" },
			wantDeprecated: []string{"http"},
		},
		{
			name: "all of the retired image's flags",
			args: []string{"--election=my-app", "--election-namespace=team-a", "--id=pod-a", "--http=localhost:4040"},
			want: func(o *Options) bool {
				return o.LeaseName == "my-app" && o.LeaseNamespace == "team-a" && o.Identity == "pod-a" && o.HTTPAddress == "localhost:4040"
			},
			wantDeprecated: []string{"election", "election-namespace", "id", "http"},
		},
		{
			name:           "alias and flag agree",
			args:           []string{"--election=my-app", "--lease-name=my-app"},
			want:           func(o *Options) bool { return o.LeaseName == "my-app" },
			wantDeprecated: []string{"election"},
		},
		{
			name:    "alias and flag disagree",
			args:    []string{"--election=old-app", "--lease-name=new-app"},
			wantErr: []string{`--lease-name and its deprecated alias --election disagree ("new-app", "old-app")`},
		},
		{
			name:    "several disagreements",
			args:    []string{"--lease-name=my-app", "--id=a", "--identity=b", "--http=:1", "--http-address=:2"},
			wantErr: []string{"--identity and its deprecated alias --id", "--http-address and its deprecated alias --http"},
		},
		{
			name:    "alias value is validated",
			args:    []string{"--election=Not_Valid"},
			wantErr: []string{"--lease-name"},
		},
		{
			name:    "alias address is validated",
			args:    []string{"--lease-name=my-app", "--http=4040"},
			wantErr: []string{"--http-address"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(tc.args, plainEnv.environment())
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("parse(%q) succeeded, want an error", tc.args)
				}
				for _, want := range tc.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q): %v", tc.args, err)
			}
			if !tc.want(o) {
				t.Errorf("parse(%q) = %+v", tc.args, o)
			}
			if !reflect.DeepEqual(o.deprecated, tc.wantDeprecated) {
				t.Errorf("deprecated = %q, want %q", o.deprecated, tc.wantDeprecated)
			}
			for _, alias := range o.deprecated {
				if _, ok := deprecatedAliases[alias]; !ok {
					t.Errorf("deprecated alias %q has no replacement", alias)
				}
			}
		})
	}
}

func TestParseOptionsVersionAndHelp(t *testing.T) {
	t.Run("version needs no other flag", func(t *testing.T) {
		o, _, err := parse([]string{"--version"}, fakeEnv{hostErr: errors.New("none")}.environment())
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		if !o.Version {
			t.Error("Version = false")
		}
	})
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--lease-name=my-app", "--help"}, {"--lease-name=Not_Valid", "-h"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			_, fs, err := parse(args, plainEnv.environment())
			if !errors.Is(err, pflag.ErrHelp) {
				t.Errorf("error = %v, want pflag.ErrHelp", err)
			}
			if fs == nil || fs.Lookup("lease-name") == nil {
				t.Error("no flag set returned for the usage")
			}
		})
	}
}

func TestCommandLineAliasWinsOverEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		vars map[string]string
		want func(o *Options) bool
	}{
		{"alias on the command line, flag in the environment", []string{"--election=cli-app"},
			map[string]string{"LEADER_ELECTOR_LEASE_NAME": "env-app"}, func(o *Options) bool { return o.LeaseName == "cli-app" }},
		{"flag on the command line, alias in the environment", []string{"--lease-name=cli-app"},
			map[string]string{"LEADER_ELECTOR_ELECTION": "env-app"}, func(o *Options) bool { return o.LeaseName == "cli-app" }},
		{"--http on the command line, --http-address in the environment", []string{"--lease-name=x", "--http=:5050"},
			map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": "127.0.0.1:4041"}, func(o *Options) bool { return o.HTTPAddress == ":5050" }},
		{"alias only in the environment", nil,
			map[string]string{"LEADER_ELECTOR_ELECTION": "env-app"}, func(o *Options) bool { return o.LeaseName == "env-app" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(tc.args, fakeEnv{vars: tc.vars, hostname: "host-1"}.environment())
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if !tc.want(o) {
				t.Errorf("the command line did not win: %+v", o)
			}
		})
	}
}

// TestClientRates: partition mode raises client-go's default rate limits to
// what renewing every partition each retry period needs; flags still win.
func TestClientRates(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		qps   float32
		burst int
	}{
		{name: "leader election keeps client-go's defaults", args: nil, qps: 0, burst: 0},
		{name: "16 partitions at a 2s retry period", args: []string{"--partitions=16"}, qps: 17, burst: 34},
		{name: "1024 partitions at a 2s retry period: capped", args: []string{"--partitions=1024"}, qps: maxDerivedQPS, burst: 2050},
		{name: "99 partitions at the shortest retry period: capped", args: []string{"--partitions=99", "--lease-duration=2s", "--renew-deadline=1s", "--retry-period=100ms"}, qps: maxDerivedQPS, burst: 200},
		{name: "one partition keeps the floor", args: []string{"--partitions=1"}, qps: 5, burst: 10},
		{name: "flags win", args: []string{"--partitions=16", "--kube-api-qps=3", "--kube-api-burst=4"}, qps: 3, burst: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(append([]string{"--lease-name=my-app"}, tc.args...), plainEnv.environment())
			if err != nil {
				t.Fatal(err)
			}
			if qps, burst := o.clientRates(); qps != tc.qps || burst != tc.burst {
				t.Errorf("clientRates() = %v, %d; want %v, %d", qps, burst, tc.qps, tc.burst)
			}
		})
	}
}

// TestObserverReadiness: an observer never leads, so unless --readiness is
// given it reports ready once it has reached the API server; its elector
// never campaigns.
func TestObserverReadiness(t *testing.T) {
	o, _, err := parse([]string{"--lease-name=my-app", "--candidate=false"}, plainEnv.environment())
	if err != nil {
		t.Fatal(err)
	}
	if o.Readiness != "candidate" {
		t.Errorf("an observer's readiness = %q, want candidate", o.Readiness)
	}
	if got := o.electionConfig().Campaign; got != election.CampaignNever {
		t.Errorf("an observer's campaign = %q, want %q", got, election.CampaignNever)
	}
	o, _, err = parse([]string{"--lease-name=my-app", "--campaign=manual"}, plainEnv.environment())
	if err != nil {
		t.Fatal(err)
	}
	if o.Readiness != "leader" || o.electionConfig().Campaign != election.CampaignManual {
		t.Errorf("manual campaign: readiness %q, campaign %q; want leader, manual", o.Readiness, o.electionConfig().Campaign)
	}
}
