package main

import (
	"strings"
	"testing"
)

func TestParseRouteOptions(t *testing.T) {
	podEnv := func(vars map[string]string) fakeEnv {
		all := map[string]string{"POD_NAME": "app-5d8-x2k", "POD_IP": "10.0.0.7"}
		for k, v := range vars {
			all[k] = v
		}
		return fakeEnv{hostname: "host-1", vars: all}
	}
	for _, tc := range []struct {
		name string
		args []string
		env  fakeEnv
		want routeOptions
		// wantErr are substrings of the one error expected; nil: valid.
		wantErr []string
	}{
		{name: "endpointslice with the downward API's pod IP", args: []string{"--route=endpointslice", "--service=app"}, env: podEnv(nil),
			want: routeOptions{Mode: "endpointslice", Service: "app", PodIP: "10.0.0.7", LeaderLabel: "leader-elector.io/leader"}},
		{name: "endpointslice with an IPv6 pod IP flag", args: []string{"--route=endpointslice", "--service=app", "--pod-ip=fd00::7"}, env: podEnv(nil),
			want: routeOptions{Mode: "endpointslice", Service: "app", PodIP: "fd00::7", LeaderLabel: "leader-elector.io/leader"}},
		{name: "everything from LEADER_ELECTOR_*", env: podEnv(map[string]string{"LEADER_ELECTOR_ROUTE": "label", "LEADER_ELECTOR_LEADER_LABEL": "example.com/primary"}),
			want: routeOptions{Mode: "label", PodIP: "10.0.0.7", LeaderLabel: "example.com/primary"}},
		{name: "label with the default label", args: []string{"--route=label"}, env: podEnv(nil),
			want: routeOptions{Mode: "label", PodIP: "10.0.0.7", LeaderLabel: "leader-elector.io/leader"}},
		{name: "none needs nothing", args: []string{"--route=none"}, env: fakeEnv{hostname: "h"},
			want: routeOptions{Mode: "none", LeaderLabel: "leader-elector.io/leader"}},

		{name: "unknown mode", args: []string{"--route=dns"}, env: podEnv(nil), wantErr: []string{`--route "dns" is unknown`}},
		{name: "endpointslice without a Service", args: []string{"--route=endpointslice"}, env: podEnv(nil), wantErr: []string{"--route=endpointslice needs --service"}},
		{name: "endpointslice with an invalid Service name", args: []string{"--route=endpointslice", "--service=My.App"}, env: podEnv(nil), wantErr: []string{`--service "My.App" is not a valid Service name`}},
		{name: "endpointslice without a pod IP", args: []string{"--route=endpointslice", "--service=app"}, env: fakeEnv{hostname: "h"}, wantErr: []string{"needs --pod-ip or $POD_IP"}},
		{name: "endpointslice with a pod IP that is not one", args: []string{"--route=endpointslice", "--service=app", "--pod-ip=10.0.0"}, env: podEnv(nil), wantErr: []string{`--pod-ip "10.0.0" is not an IP address`}},
		{name: "label with an invalid label key", args: []string{"--route=label", "--leader-label=leader?"}, env: podEnv(nil), wantErr: []string{`--leader-label "leader?" is not a valid label key`}},
		{name: "label with the group label as leader label", args: []string{"--route=label", "--leader-label=leader-elector.io/lease"}, env: podEnv(nil), wantErr: []string{"must not be leader-elector.io/lease"}},
		{name: "label with an identity that is no pod name", args: []string{"--route=label", "--identity=Host_1"}, env: podEnv(nil), wantErr: []string{`"Host_1" is not a valid pod name`}},
		{name: "label with a Lease name too long for a label value", args: []string{"--route=label", "--lease-name=" + strings.Repeat("a", 64)}, env: podEnv(nil), wantErr: []string{"is not a valid label value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--lease-name=") {
				args = append([]string{"--lease-name=my-app"}, args...)
			}
			o, _, err := parseOptions(args, tc.env.environment())
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("parseOptions: %v", err)
				}
				if o.Routing != tc.want {
					t.Errorf("routing options %+v, want %+v", o.Routing, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("parseOptions(%q) accepted %+v", args, o.Routing)
			}
			if n := errorCount(err); n != 1 {
				t.Errorf("%d errors, want 1: %v", n, err)
			}
			for _, want := range tc.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}
