//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// partitionWorkerScript is a partition's child: it appends "<pid> <token>
// <partition>" to path (the child monitor's file) when it starts, then a
// heartbeat "<partition> <token>" to dir/hb-<partition> every 50 ms until
// SIGTERM, when it exits at once (its exit acknowledges a drain).
func partitionWorkerScript(path, dir string) string {
	return `echo "$$ $LEADER_ELECTOR_FENCING_TOKEN $LEADER_ELECTOR_PARTITION" >> ` + path + `
trap 'exit 0' TERM
while :; do echo "$LEADER_ELECTOR_PARTITION $LEADER_ELECTOR_FENCING_TOKEN" >> ` + dir + `/hb-$LEADER_ELECTOR_PARTITION; sleep 0.05; done`
}

// TestSupervisedPartitionWorkers: three members, each with `leader-elector
// run --partitions` as its app, run one child per owned partition. Across
// a join, SIGKILL and SIGSTOP of a member's sidecar, a graceful leave and a
// reshard (a rolling update from N=6 to N=8), the child monitor, reading
// process state every 2 ms, never sees two children of one partition
// alive, and a partition's children run under growing tokens; after each
// step every partition has a child again. The heartbeats the children
// write show each partition's tokens in the order they ran.
func TestSupervisedPartitionWorkers(t *testing.T) {
	// A supervised partition adds a step to settling: the child starts after
	// --start-delay and only under a claim renewed since. On a starved
	// machine one renewal can come too late, and the member then releases
	// the partition (its child stopped, as it must be) and the group takes it
	// back at the Lease's expiry: one more lease duration than settleBound
	// allows for.
	const bound = settleBound + leaseDuration
	lease := leaseName(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "children")
	m := startChildMonitor(t, pidFile)
	next := 0
	type member struct {
		sidecar *candidate
		run     *supervisor
	}
	// join starts a member with N partitions and its app.
	join := func(n int) member {
		c := startCandidate(t, fmt.Sprintf("%s-%d", lease, next), candidateOptions{
			lease: lease,
			// An app that acknowledges: the drain ends with the child's
			// exit, long before this timeout.
			extraArgs:   []string{fmt.Sprintf("--partitions=%d", n), "--drain-timeout=5s"},
			startedPath: "/partitions",
		})
		next++
		return member{c, startSupervisor(t, c, []string{"--partitions", "--stop-grace=300ms"}, partitionWorkerScript(pidFile, dir))}
	}
	// leave stops a member as the kubelet stops a pod with a native
	// sidecar: the app first, then the sidecar.
	leave := func(mb member) {
		mb.run.signal(syscall.SIGTERM)
		if code := mb.run.exitCode(giveUp); code != 0 {
			t.Fatalf("%s's app exited %d after SIGTERM, want 0", mb.sidecar.name, code)
		}
		mb.sidecar.signal(syscall.SIGTERM)
		if code, err := mb.sidecar.waitExit(giveUp); err != nil || code != 0 {
			t.Fatalf("%s: exit %d, %v", mb.sidecar.name, code, err)
		}
	}
	// settled waits for a full and fair assignment of n partitions among
	// members, where each partition's one live child is its owner's, in
	// the owner's term: a child left from an earlier term must be gone.
	settled := func(what string, members []member, n int, since time.Time) {
		t.Helper()
		var last string
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, bound, true, func(context.Context) (bool, error) {
			var sidecars []*candidate
			for _, mb := range members {
				sidecars = append(sidecars, mb.sidecar)
			}
			if ok, why := fairNowN(sidecars, n); !ok {
				last = why
				return false, nil
			}
			terms := map[string]string{}
			for _, c := range sidecars {
				p, err := c.partitions()
				if err != nil {
					last = err.Error()
					return false, nil
				}
				for _, o := range p.Owned {
					terms[strconv.Itoa(o.Partition)] = strconv.FormatInt(o.FencingToken, 10)
				}
			}
			alive := m.aliveTokens()
			for i := range n {
				key := strconv.Itoa(i)
				if got := alive[key]; len(got) != 1 || got[0] != terms[key] {
					last = fmt.Sprintf("partition %d: children alive under tokens %v, want one under its owner's %s", i, got, terms[key])
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: not settled within %v: %s", what, bound, last)
		}
		t.Logf("MEASURED supervised partitions %s: full, fair and one child per partition, in its owner's term, after %v", what, time.Since(since).Round(time.Millisecond))
	}

	start := time.Now()
	members := []member{join(6), join(6), join(6)}
	settled("3 members", members, 6, start)

	start = time.Now()
	members = append(members, join(6))
	settled("join 3→4", members, 6, start)

	// A crash: the killed sidecar's partitions' children die by their
	// claims' ends; the others take the partitions at expiry.
	crashed := members[0]
	start = time.Now()
	crashed.sidecar.h.Kill()
	members = members[1:]
	settled("SIGKILL of a sidecar 4→3", members, 6, start)
	crashed.run.signal(syscall.SIGTERM)
	if code := crashed.run.exitCode(giveUp); code != 0 {
		t.Errorf("the crashed member's app exited %d after SIGTERM, want 0", code)
	}

	// A frozen sidecar: its children are killed by their claims' ends while
	// it cannot renew; on thaw it rejoins and gets children again.
	frozen := members[0]
	start = time.Now()
	frozen.sidecar.signal(syscall.SIGSTOP)
	settled("SIGSTOP of a sidecar 3→2", members[1:], 6, start)
	start = time.Now()
	frozen.sidecar.signal(syscall.SIGCONT)
	settled("SIGCONT 2→3", members, 6, start)

	start = time.Now()
	leave(members[2])
	members = members[:2]
	settled("graceful leave 3→2", members, 6, start)

	// A reshard: two members with N=8 join, the old ones leave.
	start = time.Now()
	members = append(members, join(8), join(8))
	settled("reshard: 2 at N=6 and 2 at N=8", members, 6, start)
	start = time.Now()
	leave(members[0])
	leave(members[1])
	members = members[2:]
	settled("reshard: rolled to N=8", members, 8, start)

	m.check(t)
	checkHeartbeats(t, dir, 8)
}

// checkHeartbeats reads each partition's heartbeats and fails on a token
// that goes back.
func checkHeartbeats(t *testing.T, dir string, n int) {
	t.Helper()
	for i := range n {
		b, err := os.ReadFile(filepath.Join(dir, "hb-"+strconv.Itoa(i)))
		if err != nil {
			t.Errorf("partition %d: no heartbeats: %v", i, err)
			continue
		}
		var last int64
		var terms []string
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 || f[0] != strconv.Itoa(i) {
				t.Errorf("partition %d: heartbeat %q", i, line)
				continue
			}
			token, _ := strconv.ParseInt(f[1], 10, 64)
			if token < last {
				t.Errorf("partition %d: a heartbeat under token %d after one under %d", i, token, last)
			}
			if token != last {
				terms = append(terms, f[1])
			}
			last = token
		}
		t.Logf("partition %d ran under tokens %s", i, strings.Join(terms, ", "))
	}
}
