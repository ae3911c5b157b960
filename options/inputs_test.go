package options

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestInputRanges: every flag value outside the supported range is refused
// with one error naming the flag (issue 11, section 4).
func TestInputRanges(t *testing.T) {
	endpointslice := []string{"--route=endpointslice", "--service=app"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		// hostname is the fallback identity; "host-1" if empty.
		hostname string
		wantErr  []string
		// wantCount is the number of errors; 1 if zero.
		wantCount int
	}{
		// Timings.
		{name: "lease duration that overflows the Lease's seconds", args: []string{"--lease-duration=1000000h", "--renew-deadline=999999h", "--retry-period=1h"},
			wantErr: []string{"--lease-duration 1000000h is outside the supported range 2s..24h", "--renew-deadline 999999h is outside the supported range 1s..24h"}, wantCount: 2},
		{name: "lease duration just above a day", args: []string{"--lease-duration=86401s", "--renew-deadline=10s"}, wantErr: []string{"--lease-duration 24h0m1s is outside the supported range 2s..24h"}},
		{name: "lease duration of a second", args: []string{"--lease-duration=1s", "--renew-deadline=500ms", "--retry-period=100ms"},
			wantErr: []string{"--lease-duration 1s is outside the supported range 2s..24h", "--renew-deadline 500ms is outside the supported range 1s..24h"}, wantCount: 2},
		{name: "nanosecond renew deadline and retry period", args: []string{"--lease-duration=1s", "--renew-deadline=3ns", "--retry-period=2ns"},
			wantErr: []string{"--lease-duration 1s is outside", "--renew-deadline 3ns is outside the supported range 1s..24h", "--retry-period 2ns is outside the supported range 100ms..24h"}, wantCount: 3},
		{name: "renew deadline just under a second", args: []string{"--lease-duration=2s", "--renew-deadline=999ms", "--retry-period=100ms"}, wantErr: []string{"--renew-deadline 999ms is outside"}},
		{name: "retry period just under 100ms", args: []string{"--lease-duration=2s", "--renew-deadline=1s", "--retry-period=99ms"}, wantErr: []string{"--retry-period 99ms is outside"}},
		{name: "partition mode needing more requests than the derived rate allows", args: []string{"--partitions=1024", "--lease-duration=4s", "--renew-deadline=2s", "--retry-period=500ms"},
			wantErr: []string{"--partitions=1024 with --retry-period=500ms needs 2050 Lease requests per second", "at most 1000", "lengthen --retry-period to at least 1.025s, or set --kube-api-qps"}},
		{name: "the reviewer's 2 M requests per second", args: []string{"--partitions=1024", "--lease-duration=2s", "--renew-deadline=1s", "--retry-period=1ms"},
			wantErr: []string{"--retry-period 1ms is outside", "needs 1025000 Lease requests per second"}, wantCount: 2},
		{name: "kube-api-qps not a number", args: []string{"--kube-api-qps=NaN"}, wantErr: []string{"--kube-api-qps must be a finite number"}},
		{name: "kube-api-qps infinite", args: []string{"--kube-api-qps=+Inf"}, wantErr: []string{"--kube-api-qps must be a finite number"}},

		// Identity.
		{name: "identity with a newline", args: []string{"--identity=pod\nfoo"}, wantErr: []string{`--identity "pod\nfoo" is not a valid pod name`}},
		{name: "identity with spaces around", args: []string{"--identity= pod-a "}, wantErr: []string{`--identity " pod-a " is not a valid pod name`}},
		{name: "identity of 10 000 characters", args: []string{"--identity=" + strings.Repeat("a", 10000)}, wantErr: []string{"is not a valid pod name", "no more than 253 characters", "(10000 characters)"}},
		{name: "identity that is the gate's sentinel", args: []string{"--identity=(not admitted by the gate)"}, wantErr: []string{"is not a valid pod name"}},
		{name: "identity that looks like a previous incarnation", args: []string{"--identity=pod-a (previous incarnation)"}, wantErr: []string{"is not a valid pod name"}},
		{name: "identity in upper case", args: []string{"--identity=Pod-A"}, wantErr: []string{`--identity "Pod-A" is not a valid pod name`}},
		{name: "identity from $POD_NAME", env: map[string]string{"POD_NAME": "pod_a"}, wantErr: []string{`--identity "pod_a" is not a valid pod name`}},
		{name: "identity from the hostname", hostname: "host_1", wantErr: []string{`--identity "host_1" is not a valid pod name`}},

		// Pod IP.
		{name: "loopback pod IP", args: append([]string{"--pod-ip=127.0.0.1"}, endpointslice...), wantErr: []string{`--pod-ip "127.0.0.1" is not a routable unicast address: it is a loopback address`}},
		{name: "IPv6 loopback pod IP", args: append([]string{"--pod-ip=::1"}, endpointslice...), wantErr: []string{"loopback"}},
		{name: "unspecified pod IP", args: append([]string{"--pod-ip=0.0.0.0"}, endpointslice...), wantErr: []string{`--pod-ip "0.0.0.0" is not a routable unicast address: it is the unspecified address`}},
		{name: "IPv6 unspecified pod IP", args: append([]string{"--pod-ip=::"}, endpointslice...), wantErr: []string{"unspecified"}},
		{name: "IPv4-mapped pod IP", args: append([]string{"--pod-ip=::ffff:10.0.0.1"}, endpointslice...), wantErr: []string{`--pod-ip "::ffff:10.0.0.1" is not an IP address`, "IPv4-mapped"}},
		{name: "multicast pod IP", args: append([]string{"--pod-ip=224.0.0.1"}, endpointslice...), wantErr: []string{"multicast"}},
		{name: "link-local pod IP", args: append([]string{"--pod-ip=169.254.0.5"}, endpointslice...), wantErr: []string{"link-local"}},
		{name: "broadcast pod IP", args: append([]string{"--pod-ip=255.255.255.255"}, endpointslice...), wantErr: []string{"broadcast"}},
		{name: "pod IP with leading zeros", args: append([]string{"--pod-ip=010.0.0.1"}, endpointslice...), wantErr: []string{`--pod-ip "010.0.0.1" is not an IP address`}},
		{name: "pod IP with a zone", args: append([]string{"--pod-ip=fe80::1%eth0"}, endpointslice...), wantErr: []string{"--pod-ip"}},
		{name: "loopback pod IP from $POD_IP", args: endpointslice, env: map[string]string{"POD_IP": "127.0.0.1"}, wantErr: []string{"loopback"}},

		// Listen addresses.
		{name: "http address that is no IP address", args: []string{"--http-address=999.999.999.999:80"}, wantErr: []string{`--http-address "999.999.999.999:80": invalid host "999.999.999.999": want an IP address, "localhost", or none`, "host names are not resolved"}},
		{name: "http address with a host name", args: []string{"--http-address=example.invalid:80"}, wantErr: []string{`invalid host "example.invalid"`, "host names are not resolved"}},
		{name: "probe address with a negative zero port", args: []string{"--probe-address=:-0"}, wantErr: []string{`--probe-address ":-0": invalid port "-0"`}},
		{name: "port with a plus sign", args: []string{"--http-address=127.0.0.1:+4040"}, wantErr: []string{`invalid port "+4040"`}},
		{name: "port with a leading zero", args: []string{"--http-address=127.0.0.1:04040"}, wantErr: []string{`invalid port "04040"`}},
		{name: "multicast listen address", args: []string{"--http-address=224.0.0.1:4040"}, wantErr: []string{"multicast"}},
		{name: "localhost and 127.0.0.1 on the same port", args: []string{"--http-address=localhost:8080", "--probe-address=127.0.0.1:8080"}, wantErr: []string{"would listen on the same port"}},
		{name: "localhost and ::1 on the same port", args: []string{"--http-address=localhost:9090", "--probe-address=[::1]:9090"}, wantErr: []string{"would listen on the same port"}},
		{name: "IPv4-mapped and plain address on the same port", args: []string{"--http-address=[::ffff:127.0.0.1]:9090", "--probe-address=127.0.0.1:9090"}, wantErr: []string{"would listen on the same port"}},
		{name: "two wildcards on the same port", args: []string{"--http-address=0.0.0.0:9090", "--probe-address=[::]:9090"}, wantErr: []string{"would listen on the same port"}},

		// Environment.
		{name: "misspelt timing variable", env: map[string]string{"POD_NAME": "pod-a", "LEADER_ELECTOR_LEASE_DURATON": "60s"},
			wantErr: []string{"unknown environment variable LEADER_ELECTOR_LEASE_DURATON (did you mean LEADER_ELECTOR_LEASE_DURATION?)"}},
		{name: "variable of no flag", env: map[string]string{"POD_NAME": "pod-a", "LEADER_ELECTOR_NO_SUCH_FLAG": "x"},
			wantErr: []string{"unknown environment variable LEADER_ELECTOR_NO_SUCH_FLAG; LEADER_ELECTOR_<FLAG> variables set the flags"}},
		{name: "help is not read from the environment", env: map[string]string{"POD_NAME": "pod-a", "LEADER_ELECTOR_HELP": "true"}, wantErr: []string{"unknown environment variable LEADER_ELECTOR_HELP"}},
		{name: "two unknown variables", env: map[string]string{"POD_NAME": "pod-a", "LEADER_ELECTOR_RETRY_PERIO": "1s", "LEADER_ELECTOR_IDENTITIY": "x"},
			wantErr: []string{"LEADER_ELECTOR_IDENTITIY (did you mean LEADER_ELECTOR_IDENTITY?)", "LEADER_ELECTOR_RETRY_PERIO (did you mean LEADER_ELECTOR_RETRY_PERIOD?)"}, wantCount: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fakeEnv{hostname: tc.hostname, vars: tc.env}
			if env.hostname == "" {
				env.hostname = "host-1"
			}
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			o, _, err := parse(args, env.environment())
			if err == nil {
				t.Fatalf("parse(%q) = %+v, want an error", args, o)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			wantCount := max(tc.wantCount, 1)
			if got := errorCount(err); got != wantCount {
				t.Errorf("%d errors, want %d: %v", got, wantCount, err)
			}
		})
	}
}

// TestInputRangeEdges: the ends of every supported range are accepted.
func TestInputRangeEdges(t *testing.T) {
	endpointslice := []string{"--route=endpointslice", "--service=app"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{name: "longest lease", args: []string{"--lease-duration=24h", "--renew-deadline=23h", "--retry-period=1h"}},
		{name: "shortest timings", args: []string{"--lease-duration=2s", "--renew-deadline=1s", "--retry-period=100ms"}},
		{name: "most partitions at the default retry period", args: []string{"--partitions=1024"}},
		{name: "partitions at exactly the derived rate's limit", args: []string{"--partitions=999", "--retry-period=1s", "--renew-deadline=2s", "--lease-duration=3s"}},
		{name: "partitions above the derived rate with an explicit rate", args: []string{"--partitions=1024", "--lease-duration=4s", "--renew-deadline=2s", "--retry-period=500ms", "--kube-api-qps=3000"}},
		{name: "identity of 253 characters", args: []string{"--identity=" + strings.Repeat("a", 253)}},
		{name: "dotted identity", args: []string{"--identity=pod-a.example"}},
		{name: "IPv4 pod IP", args: append([]string{"--pod-ip=10.1.2.3"}, endpointslice...)},
		{name: "IPv6 pod IP", args: append([]string{"--pod-ip=fd00::7"}, endpointslice...)},
		{name: "localhost listen address", args: []string{"--http-address=localhost:4040"}},
		{name: "IPv6 loopback listen address", args: []string{"--http-address=[::1]:4040"}},
		{name: "highest port", args: []string{"--http-address=127.0.0.1:65535"}},
		{name: "port 0 twice picks two free ports", args: []string{"--http-address=localhost:0", "--probe-address=:0"}},
		{name: "two loopback addresses on the same port", args: []string{"--http-address=127.0.0.1:8080", "--probe-address=127.0.0.2:8080"}},
		{name: "service link variables", env: map[string]string{
			"LEADER_ELECTOR_DEMO_SERVICE_HOST": "10.96.0.10", "LEADER_ELECTOR_DEMO_SERVICE_PORT": "80", "LEADER_ELECTOR_DEMO_SERVICE_PORT_HTTP": "80",
			"LEADER_ELECTOR_DEMO_PORT": "tcp://10.96.0.10:80", "LEADER_ELECTOR_DEMO_PORT_80_TCP": "tcp://10.96.0.10:80",
			"LEADER_ELECTOR_DEMO_PORT_80_TCP_PROTO": "tcp", "LEADER_ELECTOR_DEMO_PORT_80_TCP_PORT": "80", "LEADER_ELECTOR_DEMO_PORT_80_TCP_ADDR": "10.96.0.10",
			"LEADER_ELECTOR_SERVICE_HOST": "10.96.0.11", "LEADER_ELECTOR_PORT": "tcp://10.96.0.11:8080", "LEADER_ELECTOR_PORT_8080_SCTP_ADDR": "10.96.0.11",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars := map[string]string{"POD_IP": "10.0.0.7"}
			for k, v := range tc.env {
				vars[k] = v
			}
			args := append([]string{"--lease-name=my-app"}, tc.args...)
			if _, _, err := parse(args, fakeEnv{hostname: "host-1", vars: vars}.environment()); err != nil {
				t.Errorf("parse(%q): %v", args, err)
			}
		})
	}
}

// TestServiceLinkVariablesLogged: variables of the Kubernetes service links
// are not settings; they are named once in the log, not refused.
func TestServiceLinkVariablesLogged(t *testing.T) {
	env := fakeEnv{hostname: "host-1", vars: map[string]string{"LEADER_ELECTOR_DEMO_SERVICE_HOST": "10.96.0.10", "LEADER_ELECTOR_DEMO_PORT": "tcp://10.96.0.10:80"}}
	o, _, err := parse([]string{"--lease-name=my-app"}, env.environment())
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"LEADER_ELECTOR_DEMO_PORT", "LEADER_ELECTOR_DEMO_SERVICE_HOST"}
	if strings.Join(o.serviceLinks, ",") != strings.Join(want, ",") {
		t.Errorf("serviceLinks = %q, want %q", o.serviceLinks, want)
	}
}

// TestServiceLinkShadowingFlag: a Service named leader-elector-advertise
// makes the kubelet set LEADER_ELECTOR_ADVERTISE_PORT=tcp://… (the variable
// of --advertise-port) in every container of the namespace. That value is a
// service link, not a setting: the flag keeps its default and the sidecar
// starts. The environment is the kubelet's for such a Service, exactly.
func TestServiceLinkShadowingFlag(t *testing.T) {
	kubelet := map[string]string{
		"POD_NAME": "pod-a", "POD_NAMESPACE": "ns", "KUBECONFIG": "/nonexistent",
		"LEADER_ELECTOR_LEASE_NAME":                  "demo",
		"LEADER_ELECTOR_ADVERTISE_SERVICE_HOST":      "10.96.0.5",
		"LEADER_ELECTOR_ADVERTISE_SERVICE_PORT":      "80",
		"LEADER_ELECTOR_ADVERTISE_PORT":              "tcp://10.96.0.5:80",
		"LEADER_ELECTOR_ADVERTISE_PORT_80_TCP":       "tcp://10.96.0.5:80",
		"LEADER_ELECTOR_ADVERTISE_PORT_80_TCP_PROTO": "tcp",
		"LEADER_ELECTOR_ADVERTISE_PORT_80_TCP_PORT":  "80",
		"LEADER_ELECTOR_ADVERTISE_PORT_80_TCP_ADDR":  "10.96.0.5",
	}
	for _, tc := range []struct {
		name     string
		env      map[string]string
		wantPort int
	}{
		{name: "the kubelet's variables for the Service", env: kubelet},
		{name: "udp, IPv6", env: map[string]string{"LEADER_ELECTOR_LEASE_NAME": "demo", "LEADER_ELECTOR_ADVERTISE_PORT": "udp://[fd00::5]:53"}},
		{name: "sctp", env: map[string]string{"LEADER_ELECTOR_LEASE_NAME": "demo", "LEADER_ELECTOR_ADVERTISE_PORT": "sctp://10.96.0.5:9000"}},
		// The pod spec's own env wins over the service links in the kubelet,
		// so a number here is the operator's setting.
		{name: "the operator's own value", env: map[string]string{"LEADER_ELECTOR_LEASE_NAME": "demo", "POD_IP": "10.0.0.7", "LEADER_ELECTOR_ADVERTISE_PORT": "8080"}, wantPort: 8080},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(nil, fakeEnv{hostname: "host-1", vars: tc.env}.environment())
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if o.Advertise.Port != tc.wantPort {
				t.Errorf("--advertise-port = %d, want %d", o.Advertise.Port, tc.wantPort)
			}
			shadowed := slices.Contains(o.shadowingLinks, "LEADER_ELECTOR_ADVERTISE_PORT")
			if want := tc.wantPort == 0; shadowed != want {
				t.Errorf("LEADER_ELECTOR_ADVERTISE_PORT ignored as a service link: %v, want %v (shadowingLinks %q)", shadowed, want, o.shadowingLinks)
			}
		})
	}
}

// TestNoFlagVariableTakesServiceLinkValues: the kubelet's service link
// variables of a Service named leader-elector-<x> are told apart from
// settings only by their value where the value is an address
// (tcp://host:port). A flag whose variable is another service link name
// (…_SERVICE_HOST, …_SERVICE_PORT, …_PORT_<n>_TCP_PORT, …) would take the
// kubelet's IP or port number as a valid setting, silently.
func TestNoFlagVariableTakesServiceLinkValues(t *testing.T) {
	newFlagSet(newOptions()).VisitAll(func(f *pflag.Flag) {
		name := envName(f.Name)
		if serviceLink.MatchString(name) && !serviceLinkAddressName.MatchString(name) {
			t.Errorf("--%s's variable %s is a name the kubelet gives a service link a plain value under; rename the flag", f.Name, name)
		}
	})
}
