//go:build linux

package memtrim

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Trim advises the kernel that the read-only mappings of the running
// executable (code, read-only data, function tables) are not needed now
// (MADV_DONTNEED): they leave the process's resident set, and the pages
// it runs again come back from the page cache at the cost of a minor fault.
// Only mappings that no write ever touched are advised: the data and bss
// segments, the heap and the stacks are left alone, so nothing the program
// holds is lost, only its view of the file.
//
// Not MADV_PAGEOUT, which would also evict the pages from the page cache:
// it skips pages that another process maps (every sidecar of the same image
// on a node shares them), and those it does evict must be read from disk
// again when used, which measurably delayed a takeover in the benchmark.
func Trim() (Result, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return Result{}, fmt.Errorf("stat the executable: %w", err)
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return Result{}, fmt.Errorf("find the executable: %w", err)
	}
	ranges, err := executableRanges("/proc/self/maps", exe, st)
	if err != nil {
		return Result{}, err
	}
	var res Result
	for _, r := range ranges {
		if err := madvise(r, unix.MADV_DONTNEED); err != nil {
			return res, fmt.Errorf("madvise %#x-%#x: %w", r.start, r.end, err)
		}
		res.Bytes += r.end - r.start
	}
	return res, nil
}

type addrRange struct{ start, end uint64 }

// madvise is the system call on an address range that the Go heap does not
// own: unix.Madvise takes a []byte, which would mean making one out of a
// uintptr (go vet's unsafeptr rule forbids it).
func madvise(r addrRange, advice int) error {
	_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(r.start), uintptr(r.end-r.start), uintptr(advice))
	if errno != 0 {
		return errno
	}
	return nil
}

// executableRanges lists the mappings of the executable (path exe, file
// st) in the maps file at path that are not writable. A mapping is the
// executable's when its path is exe (with " (deleted)" when the file was
// replaced after the start) or its device and inode are st's: on overlayfs,
// a container's root, the kernel may show the one and stat the other.
func executableRanges(path, exe string, st unix.Stat_t) ([]addrRange, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	dev := fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
	var out []addrRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// address perms offset dev inode path
		fields := strings.SplitN(strings.Join(strings.Fields(sc.Text()), " "), " ", 6)
		if len(fields) < 6 || strings.Contains(fields[1], "w") {
			continue
		}
		sameFile := fields[3] == dev && fields[4] == strconv.FormatUint(st.Ino, 10)
		if !sameFile && fields[5] != exe && fields[5] != exe+" (deleted)" {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("%s: unexpected address range %q", path, fields[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, addrRange{start, end})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no read-only mapping of the executable (device %s, inode %d)", path, dev, st.Ino)
	}
	return out, nil
}
