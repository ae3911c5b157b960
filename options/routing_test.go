package options

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
		// Only the prefix and its subdomains are reserved, not names that
		// merely contain them.
		{name: "label under a prefix that only ends like k8s.io", args: []string{"--route=label", "--leader-label=myk8s.io/leader"}, env: podEnv(nil),
			want: routeOptions{Mode: "label", PodIP: "10.0.0.7", LeaderLabel: "myk8s.io/leader"}},
		{name: "label whose name part is a controller's key", args: []string{"--route=label", "--leader-label=example.com/pod-template-hash"}, env: podEnv(nil),
			want: routeOptions{Mode: "label", PodIP: "10.0.0.7", LeaderLabel: "example.com/pod-template-hash"}},
		{name: "a reserved key is no concern without --route=label", args: []string{"--route=none", "--leader-label=pod-template-hash"}, env: podEnv(nil),
			want: routeOptions{Mode: "none", PodIP: "10.0.0.7", LeaderLabel: "pod-template-hash"}},
		{name: "none needs nothing", args: []string{"--route=none"}, env: fakeEnv{hostname: "h"},
			want: routeOptions{Mode: "none", LeaderLabel: "leader-elector.io/leader"}},

		{name: "unknown mode", args: []string{"--route=dns"}, env: podEnv(nil), wantErr: []string{`--route "dns" is unknown`}},
		{name: "endpointslice without a Service", args: []string{"--route=endpointslice"}, env: podEnv(nil), wantErr: []string{"--route=endpointslice needs --service"}},
		{name: "endpointslice with an invalid Service name", args: []string{"--route=endpointslice", "--service=My.App"}, env: podEnv(nil), wantErr: []string{`--service "My.App" is not a valid Service name`}},
		{name: "endpointslice without a pod IP", args: []string{"--route=endpointslice", "--service=app"}, env: fakeEnv{hostname: "h"}, wantErr: []string{"needs --pod-ip or $POD_IP"}},
		{name: "endpointslice with a pod IP that is not one", args: []string{"--route=endpointslice", "--service=app", "--pod-ip=10.0.0"}, env: podEnv(nil), wantErr: []string{`--pod-ip "10.0.0" is not an IP address`}},
		{name: "label with an invalid label key", args: []string{"--route=label", "--leader-label=leader?"}, env: podEnv(nil), wantErr: []string{`--leader-label "leader?" is not a valid label key`}},
		{name: "label with the group label as leader label", args: []string{"--route=label", "--leader-label=leader-elector.io/lease"}, env: podEnv(nil), wantErr: []string{"must not be leader-elector.io/lease"}},
		{name: "label with pod-template-hash (the ReplicaSet's selector)", args: []string{"--route=label", "--leader-label=pod-template-hash"}, env: podEnv(nil), wantErr: []string{`--leader-label "pod-template-hash" is reserved`, "Deployment controller"}},
		{name: "label with controller-revision-hash", args: []string{"--route=label", "--leader-label=controller-revision-hash"}, env: podEnv(nil), wantErr: []string{`"controller-revision-hash" is reserved`, "StatefulSet and DaemonSet"}},
		{name: "label with pod-template-generation", args: []string{"--route=label", "--leader-label=pod-template-generation"}, env: podEnv(nil), wantErr: []string{`"pod-template-generation" is reserved`}},
		{name: "label with the Job's legacy controller-uid", args: []string{"--route=label", "--leader-label=controller-uid"}, env: podEnv(nil), wantErr: []string{`"controller-uid" is reserved`}},
		{name: "label with the Job's legacy job-name", args: []string{"--route=label", "--leader-label=job-name"}, env: podEnv(nil), wantErr: []string{`"job-name" is reserved`}},
		{name: "label under kubernetes.io/", args: []string{"--route=label", "--leader-label=kubernetes.io/leader"}, env: podEnv(nil), wantErr: []string{`is reserved: its prefix kubernetes.io/ is reserved for Kubernetes`}},
		{name: "label under k8s.io/", args: []string{"--route=label", "--leader-label=k8s.io/leader"}, env: podEnv(nil), wantErr: []string{`its prefix k8s.io/ is reserved`}},
		{name: "label under a subdomain of kubernetes.io/", args: []string{"--route=label", "--leader-label=statefulset.kubernetes.io/pod-name"}, env: podEnv(nil), wantErr: []string{`its prefix statefulset.kubernetes.io/ is reserved`}},
		{name: "label under apps.kubernetes.io/", args: []string{"--route=label", "--leader-label=apps.kubernetes.io/pod-index"}, env: podEnv(nil), wantErr: []string{`its prefix apps.kubernetes.io/ is reserved`}},
		{name: "label under a subdomain of k8s.io/", args: []string{"--route=label", "--leader-label=node.k8s.io/leader"}, env: podEnv(nil), wantErr: []string{`its prefix node.k8s.io/ is reserved`}},
		{name: "label with a reserved key from LEADER_ELECTOR_LEADER_LABEL", env: podEnv(map[string]string{"LEADER_ELECTOR_ROUTE": "label", "LEADER_ELECTOR_LEADER_LABEL": "app.kubernetes.io/name"}), wantErr: []string{`"app.kubernetes.io/name" is reserved`}},
		{name: "label with an identity that is no pod name", args: []string{"--route=label", "--identity=Host_1"}, env: podEnv(nil), wantErr: []string{`"Host_1" is not a valid pod name`}},
		{name: "label with a Lease name too long for a label value", args: []string{"--route=label", "--lease-name=" + strings.Repeat("a", 64)}, env: podEnv(nil), wantErr: []string{"is not a valid label value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if !strings.Contains(strings.Join(args, " "), "--lease-name=") {
				args = append([]string{"--lease-name=my-app"}, args...)
			}
			o, _, err := parse(args, tc.env.environment())
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
				t.Fatalf("parse(%q) accepted %+v", args, o.Routing)
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
