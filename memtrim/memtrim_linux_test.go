//go:build linux

package memtrim

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// exeResident is how much of the executable's read-only mappings is
// resident, in KiB, from /proc/self/smaps (RssFile would count the shared
// libraries of a cgo build, such as the race detector's, too).
func exeResident(t *testing.T) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ranges, err := executableRanges("/proc/self/maps", exe, st)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	var total uint64
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && len(fields) >= 5 {
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && slices.Contains(ranges, addrRange{start, end})
			continue
		}
		if in && fields[0] == "Rss:" {
			n, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	return total
}

// The test binary, like the sidecar, has mapped much of itself by the time
// it runs; Trim must give most of it back and the process must go on.
func TestTrimDropsTheExecutablesPages(t *testing.T) {
	before := exeResident(t)
	res, err := Trim()
	if err != nil {
		t.Fatalf("Trim: %v", err)
	}
	after := exeResident(t)
	t.Logf("executable resident %d KiB → %d KiB; advised %d KiB", before, after, res.Bytes>>10)
	if res.Bytes == 0 {
		t.Fatal("Trim advised no mapping")
	}
	// The test's own code maps some back at once (the kernel maps 16 pages
	// around each fault), so less than all of it goes.
	if after > before*3/4 {
		t.Errorf("the executable's resident pages went from %d KiB to %d KiB; want a quarter of them gone at least", before, after)
	}
	// The code runs on: the pages come back on use.
	if got := strings.Repeat("x", 3); got != "xxx" {
		t.Fatal(got)
	}
}

func TestExecutableRanges(t *testing.T) {
	maps := strings.Join([]string{
		"00400000-00fcb000 r-xp 00000000 fd:01 1234                               /usr/bin/sidecar (deleted)",
		"00fcb000-01a36000 r--p 00bcb000 00:2a 999                                /elsewhere/overlay/path",
		"01a36000-01a80000 rw-p 01636000 fd:01 1234                               /usr/bin/sidecar (deleted)",
		"01a80000-01b00000 rw-p 00000000 00:00 0                                  [heap]",
		"7f0000000000-7f0000001000 r--p 00000000 fd:01 77                         /usr/lib/other.so",
		"7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]",
	}, "\n") + "\n"
	path := filepath.Join(t.TempDir(), "maps")
	if err := os.WriteFile(path, []byte(maps), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first mapping is known by its path, the second by device and
	// inode; the writable one, the heap and the other file are left alone.
	st := unix.Stat_t{Dev: unix.Mkdev(0, 0x2a), Ino: 999}
	got, err := executableRanges(path, "/usr/bin/sidecar", st)
	if err != nil {
		t.Fatal(err)
	}
	want := []addrRange{{0x400000, 0xfcb000}, {0xfcb000, 0x1a36000}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %#v, want %#v", got, want)
	}
	if _, err := executableRanges(path, "/usr/bin/nothing", unix.Stat_t{Ino: 5}); err == nil {
		t.Error("no mapping of the executable: want an error")
	}
}
