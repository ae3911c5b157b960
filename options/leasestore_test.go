package options

import (
	"strings"
	"testing"
)

// --lease-store=file: takes a path, turns Events off, and refuses every
// Kubernetes-only flag, from the command line or its variable, in one line;
// $KUBECONFIG (the user's shell's) is not refused.
func TestLeaseStore(t *testing.T) {
	env := fakeEnv{hostname: "h", vars: map[string]string{"KUBECONFIG": "/home/u/.kube/config"}}
	o, err := Parse([]string{"--lease-name=a", "--lease-store=file:lease.json"}, env.environment())
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if cfg := o.AppConfig("v", "r"); cfg.Client.LeaseFile != "lease.json" {
		t.Fatalf("LeaseFile %q, want lease.json", cfg.Client.LeaseFile)
	}
	o, err = Parse([]string{"--lease-name=a"}, env.environment())
	if err != nil || o.AppConfig("v", "r").Client.LeaseFile != "" {
		t.Fatalf("default store: %v, LeaseFile %q, want the Kubernetes Lease", err, o.AppConfig("v", "r").Client.LeaseFile)
	}
	for _, tc := range []struct {
		args    []string
		vars    map[string]string
		wantErr string
	}{
		{args: []string{"--lease-store=etcd"}, wantErr: `--lease-store "etcd" is unknown`},
		{args: []string{"--lease-store=file:"}, wantErr: "needs the file's path"},
		{args: []string{"--lease-store=file:l", "--route=label", "--kubeconfig=k"}, wantErr: "--kubeconfig, --route cannot be used with it"},
		{args: []string{"--lease-store=file:l", "--events=false"}, wantErr: "--events cannot be used"},
		{args: []string{"--lease-store=file:l", "--partitions=2"}, wantErr: "--partitions cannot be used"},
		{args: []string{"--lease-store=file:l", "--proxy-address=127.0.0.1:8000", "--proxy-upstream=127.0.0.1:8080"}, wantErr: "--proxy-address cannot be used"},
		{args: []string{"--lease-store=file:l"}, vars: map[string]string{"LEADER_ELECTOR_KUBE_API_QPS": "5"}, wantErr: "--kube-api-qps cannot be used"},
		{args: []string{}, vars: map[string]string{"LEADER_ELECTOR_LEASE_STORE": "file:l", "LEADER_ELECTOR_SERVICE": "s"}, wantErr: "--service cannot be used"},
	} {
		vars := map[string]string{}
		for k, v := range tc.vars {
			vars[k] = v
		}
		_, err := Parse(append([]string{"--lease-name=a"}, tc.args...), fakeEnv{hostname: "h", vars: vars}.environment())
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v %v: %v, want one line with %q", tc.args, tc.vars, err, tc.wantErr)
		}
	}
}
