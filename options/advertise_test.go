package options

import (
	"strings"
	"testing"

	"github.com/leader-elector/leader-elector/internal/textline"
)

func TestParseAdvertiseOptions(t *testing.T) {
	pod := fakeEnv{hostname: "h", vars: map[string]string{"POD_NAME": "app-0", "POD_IP": "10.0.0.7"}}
	noIP := fakeEnv{hostname: "h", vars: map[string]string{"POD_NAME": "app-0"}}
	// The kubelet sets $KUBERNETES_SERVICE_HOST in every container, service
	// links or not.
	inPod := fakeEnv{hostname: "h", vars: map[string]string{"POD_NAME": "app-0", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}}
	for _, tc := range []struct {
		name string
		args []string
		env  fakeEnv
		// want is the address given to the elector; wantErr the substrings
		// of the one error expected.
		want    string
		wantErr []string
	}{
		{name: "off by default, even with $POD_IP", env: pod, want: ""},
		{name: "the port with $POD_IP", args: []string{"--advertise-port=8080"}, env: pod, want: "10.0.0.7:8080"},
		{name: "an IPv6 $POD_IP", args: []string{"--advertise-port=8080"}, env: fakeEnv{hostname: "h", vars: map[string]string{"POD_IP": "fd00::7"}}, want: "[fd00::7]:8080"},
		{name: "a DNS name", args: []string{"--advertise-address=app-0.app.ns.svc", "--advertise-port=443"}, env: pod, want: "app-0.app.ns.svc:443"},
		{name: "loopback, outside a pod", args: []string{"--advertise-address=127.0.0.1", "--advertise-port=18080"}, env: noIP, want: "127.0.0.1:18080"},
		{name: "from LEADER_ELECTOR_*", env: fakeEnv{hostname: "h", vars: map[string]string{"LEADER_ELECTOR_ADVERTISE_ADDRESS": "10.1.2.3", "LEADER_ELECTOR_ADVERTISE_PORT": "9000"}}, want: "10.1.2.3:9000"},

		{name: "the port without a host", args: []string{"--advertise-port=8080"}, env: noIP, wantErr: []string{"--advertise-port needs --advertise-address or $POD_IP"}},
		{name: "a host without the port", args: []string{"--advertise-address=10.0.0.5"}, env: pod, wantErr: []string{`--advertise-address "10.0.0.5" needs --advertise-port`}},
		{name: "a port out of range", args: []string{"--advertise-port=65536"}, env: pod, wantErr: []string{"--advertise-port must be within 1..65535"}},
		{name: "a negative port", args: []string{"--advertise-port=-1"}, env: pod, wantErr: []string{"--advertise-port must be within 1..65535"}},
		{name: "a host with a port", args: []string{"--advertise-address=10.0.0.5:80", "--advertise-port=8080"}, env: pod, wantErr: []string{`--advertise-address "10.0.0.5:80": invalid host`}},
		{name: "the unspecified address", args: []string{"--advertise-address=0.0.0.0", "--advertise-port=8080"}, env: pod, wantErr: []string{"unspecified address"}},
		{name: "a name that is no DNS name", args: []string{"--advertise-address=My_Host", "--advertise-port=8080"}, env: pod, wantErr: []string{`invalid host "My_Host"`}},
		{name: "a $POD_IP that is no address", args: []string{"--advertise-port=8080"}, env: fakeEnv{hostname: "h", vars: map[string]string{"POD_IP": "not an ip"}}, wantErr: []string{"invalid host"}},
		{name: "link-local, the metadata service", args: []string{"--advertise-address=169.254.169.254", "--advertise-port=80"}, env: pod, wantErr: []string{"link-local"}},
		{name: "link-local IPv6", args: []string{"--advertise-address=fe80::1", "--advertise-port=80"}, env: noIP, wantErr: []string{"link-local"}},
		{name: "loopback in a pod", args: []string{"--advertise-address=127.0.0.1", "--advertise-port=8080"}, env: inPod, wantErr: []string{"loopback"}},
		{name: "localhost in a pod", args: []string{"--advertise-address=localhost", "--advertise-port=8080"}, env: inPod, wantErr: []string{"loopback"}},
		{name: "IPv6 loopback in a pod", args: []string{"--advertise-address=::1", "--advertise-port=8080"}, env: inPod, wantErr: []string{"loopback"}},
		{name: "with --partitions", args: []string{"--advertise-port=8080", "--partitions=4"}, env: pod, wantErr: []string{"cannot be combined with --partitions"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			o, _, err := parse(args, tc.env.environment())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("parse: %v", err)
				}
				if got := o.electionConfig().AdvertiseAddress; got != tc.want {
					t.Errorf("advertised address %q, want %q", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parse(%q) accepted %+v", args, o.Advertise)
			}
			if n := errorCount(err); n != 1 {
				t.Errorf("%d errors, want 1: %v", n, err)
			}
			if line := textline.OneLine(err); strings.Contains(line, "\n") {
				t.Errorf("refusal is not one line: %q", line)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}
