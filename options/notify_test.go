package options

import (
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/notify"
)

// TestNotifyOptions: --on-change-url reaches the app in the same pod only,
// and its timeout and retries stay within their ranges.
func TestNotifyOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    notify.Options
		wantErr []string
	}{
		{name: "off by default", want: notify.Options{Timeout: 2 * time.Second, Retries: 3}},
		{name: "IPv4 loopback", args: []string{"--on-change-url=http://127.0.0.1:8081/leader-changed"},
			want: notify.Options{URL: "http://127.0.0.1:8081/leader-changed", Timeout: 2 * time.Second, Retries: 3}},
		{name: "IPv6 loopback and the range's ends", args: []string{"--on-change-url=http://[::1]:65535/", "--on-change-timeout=100ms", "--on-change-retries=0"},
			want: notify.Options{URL: "http://[::1]:65535/", Timeout: 100 * time.Millisecond}},
		{name: "localhost with a query, from the environment", env: map[string]string{"LEADER_ELECTOR_ON_CHANGE_URL": "http://localhost:1/hook?from=sidecar", "LEADER_ELECTOR_ON_CHANGE_TIMEOUT": "30s", "LEADER_ELECTOR_ON_CHANGE_RETRIES": "10"},
			want: notify.Options{URL: "http://localhost:1/hook?from=sidecar", Timeout: 30 * time.Second, Retries: 10}},

		{name: "another host", args: []string{"--on-change-url=http://10.0.0.5:8080/"}, wantErr: []string{`--on-change-url "http://10.0.0.5:8080/": host "10.0.0.5" is not a loopback address`}},
		{name: "a host name", args: []string{"--on-change-url=http://app.example:8080/"}, wantErr: []string{`host "app.example" is not a loopback address`}},
		{name: "the metadata service", args: []string{"--on-change-url=http://169.254.169.254:80/latest"}, wantErr: []string{"is not a loopback address"}},
		{name: "the unspecified address", args: []string{"--on-change-url=http://0.0.0.0:80/"}, wantErr: []string{"is not a loopback address"}},
		{name: "IPv4-mapped loopback", args: []string{"--on-change-url=http://[::ffff:127.0.0.1]:80/"}, wantErr: []string{"is not a loopback address"}},
		{name: "https", args: []string{"--on-change-url=https://127.0.0.1:8443/"}, wantErr: []string{`got scheme "https"`}},
		{name: "no scheme", args: []string{"--on-change-url=127.0.0.1:8080/x"}, wantErr: []string{"--on-change-url"}},
		{name: "no port", args: []string{"--on-change-url=http://127.0.0.1/x"}, wantErr: []string{"needs an explicit port from 1 to 65535"}},
		{name: "port 0", args: []string{"--on-change-url=http://127.0.0.1:0/x"}, wantErr: []string{`needs an explicit port from 1 to 65535, got "0"`}},
		{name: "port too high", args: []string{"--on-change-url=http://127.0.0.1:65536/x"}, wantErr: []string{"needs an explicit port"}},
		{name: "credentials", args: []string{"--on-change-url=http://user:secret@127.0.0.1:8080/"}, wantErr: []string{"must not carry credentials"}},
		{name: "a fragment", args: []string{"--on-change-url=http://127.0.0.1:8080/#x"}, wantErr: []string{"must not have a fragment"}},
		{name: "with partitions", args: []string{"--on-change-url=http://127.0.0.1:8080/", "--partitions=3"},
			want: notify.Options{URL: "http://127.0.0.1:8080/", Timeout: 2 * time.Second, Retries: 3}},
		{name: "with partitions, another host", args: []string{"--on-change-url=http://10.0.0.5:8080/", "--partitions=3"}, wantErr: []string{"is not a loopback address"}},
		{name: "timeout too short", args: []string{"--on-change-timeout=99ms"}, wantErr: []string{"--on-change-timeout 99ms is outside the supported range 100ms..30s"}},
		{name: "timeout too long", args: []string{"--on-change-timeout=1m"}, wantErr: []string{"--on-change-timeout 1m is outside"}},
		{name: "timeout zero", args: []string{"--on-change-timeout=0"}, wantErr: []string{"--on-change-timeout 0s is outside"}},
		{name: "negative retries", args: []string{"--on-change-retries=-1"}, wantErr: []string{"--on-change-retries must be within 0..10, got -1"}},
		{name: "too many retries", args: []string{"--on-change-retries=11"}, wantErr: []string{"--on-change-retries must be within 0..10, got 11"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			o, _, err := parse(args, fakeEnv{hostname: "host-1", vars: tc.env}.environment())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("parse(%q): %v", args, err)
				}
				if got := o.AppConfig("test", "").Notify; got != tc.want {
					t.Errorf("notify options %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parse(%q) accepted %+v", args, o.Notify)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if got := errorCount(err); got != 1 {
				t.Errorf("%d errors, want 1: %v", got, err)
			}
		})
	}
}
