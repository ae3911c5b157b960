package options

import (
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/proxy"
)

// TestProxyOptions: the proxy is off by default; on, it forwards to a
// loopback upstream only, on ports of its own, within its ranges.
func TestProxyOptions(t *testing.T) {
	on := []string{"--proxy-address=:7000", "--proxy-upstream=127.0.0.1:5432"}
	for _, tc := range []struct {
		name    string
		args    []string
		want    *proxy.Config
		wantErr string
	}{
		{name: "off by default"},
		{name: "on, the wait is the renew deadline", args: on,
			want: &proxy.Config{Address: ":7000", PeerAddress: ":4041", Upstream: "127.0.0.1:5432", Wait: 10 * time.Second, ShutdownDelay: 5 * time.Second, MaxConnections: 1024}},
		{name: "every flag", args: append(on, "--proxy-peer-address=10.0.0.7:7001", "--proxy-wait=2m", "--proxy-drain=1m", "--proxy-shutdown-delay=0", "--proxy-max-connections=65536"),
			want: &proxy.Config{Address: ":7000", PeerAddress: "10.0.0.7:7001", Upstream: "127.0.0.1:5432", Wait: 2 * time.Minute, Drain: time.Minute, MaxConnections: 65536}},

		{name: "no upstream", args: []string{"--proxy-address=:7000"}, wantErr: "--proxy-address needs --proxy-upstream"},
		{name: "upstream without the proxy", args: []string{"--proxy-upstream=127.0.0.1:5432"}, wantErr: "--proxy-upstream needs --proxy-address"},
		{name: "upstream on the network", args: []string{"--proxy-address=:7000", "--proxy-upstream=10.0.0.1:5432"}, wantErr: "must be a loopback IP address"},
		{name: "overlaps the probe port", args: []string{"--proxy-address=:8080", "--proxy-upstream=127.0.0.1:5432"}, wantErr: `--proxy-address ":8080" and --probe-address ":8080" would listen on the same port`},
		{name: "overlaps the API", args: append(on, "--proxy-peer-address=127.0.0.1:4040"), wantErr: `--proxy-peer-address "127.0.0.1:4040" and --http-address "127.0.0.1:4040"`},
		{name: "the two proxy ports overlap", args: append(on, "--proxy-peer-address=:7000"), wantErr: `--proxy-address ":7000" and --proxy-peer-address ":7000"`},
		{name: "peer port 0", args: append(on, "--proxy-peer-address=:0"), wantErr: "needs a port"},
		{name: "wait too long", args: append(on, "--proxy-wait=6m"), wantErr: "--proxy-wait 6m is outside the supported range 1ms..5m"},
		{name: "no wait", args: append(on, "--proxy-wait=0"), wantErr: "--proxy-wait 0s is outside"},
		{name: "drain too long", args: append(on, "--proxy-drain=61s"), wantErr: "--proxy-drain 1m1s is outside the supported range 0s..1m"},
		{name: "negative drain", args: append(on, "--proxy-drain=-1s"), wantErr: "--proxy-drain -1s is outside"},
		{name: "drain as long as the wait", args: append(on, "--proxy-drain=10s"), wantErr: "--proxy-drain 10s must be shorter than --proxy-wait (by default --renew-deadline, 10s)"},
		{name: "shutdown delay too long", args: append(on, "--proxy-shutdown-delay=61s"), wantErr: "--proxy-shutdown-delay 1m1s is outside the supported range 0s..1m"},
		{name: "negative shutdown delay", args: append(on, "--proxy-shutdown-delay=-1s"), wantErr: "--proxy-shutdown-delay -1s is outside"},
		{name: "no connections", args: append(on, "--proxy-max-connections=0"), wantErr: "--proxy-max-connections must be within 1..65536, got 0"},
		{name: "with partitions", args: append(on, "--partitions=3"), wantErr: "cannot be combined with --partitions"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			o, _, err := parse(args, fakeEnv{hostname: "host-1"}.environment())
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("parse(%q): %v", args, err)
				}
				got := o.AppConfig("test", "").Proxy
				if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
					t.Errorf("proxy config %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parse(%q) accepted %+v", args, o.Proxy)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %q does not contain %q", err, tc.wantErr)
			}
			if got := errorCount(err); got != 1 {
				t.Errorf("%d errors, want 1: %v", got, err)
			}
		})
	}
}
