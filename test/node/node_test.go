package node

import (
	"os"
	"strings"
	"testing"
)

// The harness must never create the cluster's private addresses in the
// machine's own network namespace: run outside run.sh, or told that its
// namespace is the machine's, it refuses before touching anything.
func TestRefusesTheMachinesNetworkNamespace(t *testing.T) {
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, hostNetns, want string
	}{
		{"not started by run.sh", "", "LEADER_ELECTOR_NODE_HOST_NETNS is not set"},
		{"in the machine's namespace", self, "refusing to start in the machine's network namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("LEADER_ELECTOR_NODE_HOST_NETNS", tc.hostNetns)
			err := checkIsolated()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkIsolated() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// Each kubelet release is given only the configuration fields it knows
// (make e2e-cluster-version runs an older one): failCgroupV1 from 1.31 on,
// where the pinned kubelet needs it false to start on cgroup v1.
func TestKubeletConfigPerVersion(t *testing.T) {
	n := &Node{opts: Options{WorkDir: t.TempDir()}}
	for _, tc := range []struct {
		out      string
		wantFail bool // failCgroupV1 present (and false)
	}{
		{"Kubernetes v1.30.14\n", false},
		{"Kubernetes v1.31.0", true},
		{"Kubernetes v1.37.2\n", true},
	} {
		kv, err := parseKubeletVersion(tc.out)
		if err != nil {
			t.Fatalf("parseKubeletVersion(%q): %v", tc.out, err)
		}
		v, ok := n.kubeletConfig(kv)["failCgroupV1"]
		if ok != tc.wantFail || (ok && v != false) {
			t.Errorf("kubelet %s: failCgroupV1 = %v (set: %v), want set to false: %v", kv, v, ok, tc.wantFail)
		}
	}
	for _, bad := range []string{"", "v1.30.14", "Kubernetes 1.30", "Kubernetes vX"} {
		if kv, err := parseKubeletVersion(bad); err == nil {
			t.Errorf("parseKubeletVersion(%q) = %v, want an error", bad, kv)
		}
	}
}
