package node

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
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
		config, err := n.kubeletConfig(kv)
		if err != nil {
			t.Fatalf("kubelet %s: %v", kv, err)
		}
		v, ok := config["failCgroupV1"]
		if ok != tc.wantFail || (ok && v != false) {
			t.Errorf("kubelet %s: failCgroupV1 = %v (set: %v), want set to false: %v", kv, v, ok, tc.wantFail)
		}
		if _, ok := config["crashLoopBackOff"]; ok {
			t.Errorf("kubelet %s: crashLoopBackOff set without MaxRestartBackOff", kv)
		}
	}
	// The crash back-off cap: set on a kubelet that has it on by default,
	// refused on one that does not (it would warn and ignore it).
	capped := &Node{opts: Options{WorkDir: t.TempDir(), MaxRestartBackOff: 10 * time.Second}}
	kv, _ := parseKubeletVersion("Kubernetes v1.37.2")
	config, err := capped.kubeletConfig(kv)
	if err != nil {
		t.Fatalf("kubelet %s with a crash back-off cap: %v", kv, err)
	}
	if got, want := config["crashLoopBackOff"], (map[string]string{"maxContainerRestartPeriod": "10s"}); !reflect.DeepEqual(got, want) {
		t.Errorf("kubelet %s: crashLoopBackOff = %v, want %v", kv, got, want)
	}
	kv, _ = parseKubeletVersion("Kubernetes v1.34.4")
	if _, err := capped.kubeletConfig(kv); err == nil {
		t.Errorf("kubelet %s with a crash back-off cap: no error, want one (the feature is off by default there)", kv)
	}
	for _, bad := range []string{"", "v1.30.14", "Kubernetes 1.30", "Kubernetes vX"} {
		if kv, err := parseKubeletVersion(bad); err == nil {
			t.Errorf("parseKubeletVersion(%q) = %v, want an error", bad, kv)
		}
	}
}
