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
