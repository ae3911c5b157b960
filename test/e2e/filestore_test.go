//go:build integration

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// fileStoreSlack covers, on top of the configured timings, what a file
// store handover adds: the release and take writes (two synced renames
// each), inotify's notification, and scheduling of race-detector builds on
// a loaded 2-core machine.
const fileStoreSlack = time.Second

// newFileGroup is newGroup on a lease file of the test's own (no control
// plane), under the invariant monitor.
func newFileGroup(t *testing.T, n int) (*group, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.json")
	return newGroup(t, n, candidateOptions{leaseFile: path}), path
}

// TestFileStoreBadFile: a lease file truncated, replaced by an older copy
// or made unreadable is refused with one clear error: the leader steps down by its renew
// deadline and no one leads until the file is deleted; then a new term
// starts with a higher token. The monitor sees no token going back.
func TestFileStoreBadFile(t *testing.T) {
	t.Parallel()
	g, path := newFileGroup(t, 2)
	for _, f := range []struct {
		name, want string
		spoil      func(older []byte)
	}{
		{"truncated", "is corrupt", func([]byte) {
			b, _ := os.ReadFile(path)
			writeLeaseFile(t, path, b[:len(b)/2])
		}},
		{"replaced by an older copy", "went back", func(older []byte) { writeLeaseFile(t, path, older) }},
		// Root reads a file whatever its mode: a directory in its place is
		// a file no one can read.
		{"made unreadable", "is a directory", func([]byte) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		leader := g.WaitLeader(3 * leaseDuration)
		older, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		before, _ := leader.state()
		// Let the leader renew once more, so that older is older.
		time.Sleep(2 * retryPeriod)
		f.spoil(older)
		spoiled := time.Now()
		err = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, renewDeadline+retryPeriod+fileStoreSlack, true, func(context.Context) (bool, error) {
			s, err := leader.state()
			return err == nil && !s.IsLeader, nil
		})
		if err != nil {
			t.Fatalf("%s: %s still leads %v after the file was spoiled", f.name, leader.name, time.Since(spoiled))
		}
		t.Logf("%s: %s stepped down %v after the file was spoiled", f.name, leader.name, time.Since(spoiled).Round(time.Millisecond))
		noLeaderFor(t, leaseDuration, g.Members()...)
		if !strings.Contains(leader.log(), f.want) {
			t.Errorf("%s: the leader's log does not say the file %s", f.name, f.want)
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		next := g.WaitLeader(3*leaseDuration + fileStoreSlack)
		if s, _ := next.state(); s.FencingToken <= before.FencingToken {
			t.Errorf("%s: token %d after the file was deleted, was %d", f.name, s.FencingToken, before.FencingToken)
		}
	}
}

func writeLeaseFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestFileStoreFullDisk: the disk under the lease file fills up, simulated
// by a file size limit of 0 on every candidate (RLIMIT_FSIZE: each write of
// the store's temporary files then fails, with EFBIG where a full disk
// gives ENOSPC, on the same path). The leader's renewals fail: it steps
// down by its renew deadline and no one leads; once there is room again a
// new term starts with a higher token. The monitor sees no overlap and no
// token going back.
func TestFileStoreFullDisk(t *testing.T) {
	t.Parallel()
	g, _ := newFileGroup(t, 2)
	leader := g.WaitLeader(3 * leaseDuration)
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	setFileSizeLimit := func(limit uint64) {
		t.Helper()
		for _, c := range g.Members() {
			// Only the soft limit: lowering and raising it back needs no
			// privilege.
			var old unix.Rlimit
			if err := unix.Prlimit(c.h.Pid(), unix.RLIMIT_FSIZE, nil, &old); err != nil {
				t.Fatal(err)
			}
			if err := unix.Prlimit(c.h.Pid(), unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: min(limit, old.Max), Max: old.Max}, nil); err != nil {
				t.Fatalf("%s: set its file size limit: %v", c.name, err)
			}
		}
	}
	t.Cleanup(func() { setFileSizeLimit(unix.RLIM_INFINITY) })
	setFileSizeLimit(0)
	full := time.Now()
	bound := renewDeadline + retryPeriod + fileStoreSlack
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		s, err := leader.state()
		return err == nil && !s.IsLeader, nil
	}); err != nil {
		t.Fatalf("%s still leads %v after the disk filled up (bound %v)", leader.name, time.Since(full), bound)
	}
	t.Logf("MEASURED file store, disk full: %s stepped down %v after it filled up", leader.name, time.Since(full).Round(time.Millisecond))
	noLeaderFor(t, leaseDuration, g.Members()...)

	setFileSizeLimit(unix.RLIM_INFINITY)
	next := g.WaitLeader(3*leaseDuration + fileStoreSlack)
	if s, _ := next.state(); s.FencingToken <= before.FencingToken {
		t.Errorf("token %d after the disk had room again, was %d", s.FencingToken, before.FencingToken)
	}
}

// TestFileStoreObserver: a --candidate=false sidecar on the lease file
// follows who leads through a handover and a crash, answers POST /acquire
// with 409 and POST /release with released: false, is ready (readiness
// candidate), and never writes the file: with the only candidate left
// frozen until its lease has long expired, the moment an observer that
// campaigned would take the Lease, the file stays byte for byte the same.
// (On Kubernetes TestObserver proves the same with the shipped read-only
// Role and the API server's audit log.)
func TestFileStoreObserver(t *testing.T) {
	t.Parallel()
	g, path := newFileGroup(t, 2)
	obs := startCandidate(t, "observer", candidateOptions{lease: g.lease, leaseFile: path, extraArgs: []string{"--candidate=false"}})
	g.Add(obs) // the monitor checks it never claims

	last := observerFollowsAndRefuses(t, g, obs)

	freezeOutsideTheLock(t, last)
	defer last.signal(syscall.SIGCONT)
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Polled through the window: a write fails the test when it happens.
	err = holdsFor(leaseDuration+2*retryPeriod+fileStoreSlack, 20*time.Millisecond, func() error {
		now, err := os.ReadFile(path)
		if err == nil && string(now) != string(before) {
			err = fmt.Errorf("the lease file changed while its only candidate was frozen past its lease (the observer wrote it):\nbefore %s\nafter  %s", before, now)
		}
		return err
	})
	if err != nil {
		t.Error(err)
	}
}
