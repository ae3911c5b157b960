package supervisor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A child can leave its process group (setsid, a shell with job control,
// Python's start_new_session, a daemon's double fork), and then no signal
// to the group reaches what it started. So the supervisor is a child
// subreaper (PR_SET_CHILD_SUBREAPER): every orphan among its descendants is
// re-parented to it rather than to init, and stays findable through
// /proc/<pid>/stat's parent pid. On every stop it signals the whole tree the
// workload left, not only the group, and it reaps the orphans it killed.
// The orphans that exit while the child runs are reaped when they do (on
// SIGCHLD): a child that keeps orphaning short jobs would otherwise fill
// the pid space with zombies over a long term.

// becomeSubreaper makes orphaned descendants this process's children. It
// is called before the first child starts, so no orphan can escape it.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// proc is one process as /proc/<pid>/stat shows it.
type proc struct {
	pid, ppid, pgid int
	zombie          bool
	// start is the process's start time in clock ticks since boot: a pid
	// may be reused, a (pid, start) pair names one process.
	start uint64
}

// processes lists every process visible in /proc.
func processes() ([]proc, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		p, ok := parseStat(pid, string(b))
		if ok {
			out = append(out, p)
		}
	}
	return out, nil
}

// parseStat reads /proc/<pid>/stat: "pid (comm) state ppid pgrp … starttime
// …" (proc(5): fields 3, 4, 5 and 22); comm may hold spaces and
// parentheses.
func parseStat(pid int, s string) (proc, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, pgid: pgid, start: start, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// signal sends sig to p if p is still the process the walk saw, never to
// another that reused its pid since: a pidfd names one process, and the
// start time read after opening it tells whether that is p. (Without
// pidfd_open, Linux before 5.3, the start time is compared right before a
// plain kill, which leaves a window of microseconds; so where a seccomp
// profile refuses pidfd_open.)
func (p proc) signal(sig unix.Signal) error {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return err
	}
	if err == nil {
		defer unix.Close(fd)
	}
	b, rerr := os.ReadFile("/proc/" + strconv.Itoa(p.pid) + "/stat")
	if rerr != nil {
		return rerr
	}
	if now, ok := parseStat(p.pid, string(b)); !ok || now.start != p.start {
		return unix.ESRCH
	}
	if err != nil {
		return unix.Kill(p.pid, sig)
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0)
}

// directChildren lists the pids whose parent is this process.
func directChildren() map[int]bool {
	all, _ := processes()
	self := os.Getpid()
	out := map[int]bool{}
	for _, p := range all {
		if p.ppid == self {
			out[p.pid] = true
		}
	}
	return out
}

// workloadTree is what the workload left: roots (the child and the
// watchdog, while they exist) and every orphan re-parented to this process
// except the processes in keep (what os/exec still waits for: the hooks;
// and the children this process had before it supervised anything), with
// all their descendants. It returns the live ones, and the orphans that
// are zombies (to reap).
func workloadTree(roots []int, keep func(int) bool) (live []proc, zombies []int, err error) {
	all, err := processes()
	if err != nil {
		return nil, nil, err
	}
	self := os.Getpid()
	kids := map[int][]proc{}
	for _, p := range all {
		kids[p.ppid] = append(kids[p.ppid], p)
	}
	isRoot := map[int]bool{}
	for _, r := range roots {
		isRoot[r] = true
	}
	var queue []proc
	for _, p := range kids[self] {
		switch {
		case isRoot[p.pid]:
			queue = append(queue, p)
		case keep(p.pid):
		case p.zombie:
			zombies = append(zombies, p.pid)
		default:
			queue = append(queue, p)
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if !p.zombie {
			live = append(live, p)
		}
		queue = append(queue, kids[p.pid]...)
	}
	return live, zombies, nil
}

// signalLeftovers sends sig to every live process of the workload's tree
// (workloadTree) outside the process group pgid: the stop's signal to what
// left the group, after the one to the group. A process of the group is
// skipped, or it would get the signal twice (Go apps built on client-go's
// or controller-runtime's signal handler take a second SIGTERM as "exit
// now", skipping their graceful stop), and so is the watchdog, the group's
// leader, which ignores it anyway.
func signalLeftovers(roots []int, keep func(int) bool, pgid int, sig unix.Signal) int {
	live, _, _ := workloadTree(roots, keep)
	n := 0
	for _, p := range live {
		if p.pgid == pgid {
			continue
		}
		if p.signal(sig) == nil {
			n++
		}
	}
	return n
}

// leftoverTimeout bounds killLeftovers: a process in uninterruptible sleep
// (a hung NFS mount) dies only when the kernel lets it.
const leftoverTimeout = 5 * time.Second

// killLeftovers SIGKILLs the workload's tree until a walk finds nothing
// alive: a killed process's children are re-parented to this process and
// show up in the next walk, and a process may fork while the walk runs.
// It reaps the orphans it finds dead, never a root or a kept process
// (os/exec reaps those). It returns how many processes it killed.
func killLeftovers(roots []int, keep func(int) bool) (int, error) {
	killed := map[int]bool{}
	// A ticker, not k8s.io's wait: the supervisor stays free of Kubernetes
	// modules (TestNoKubernetesClient).
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(leftoverTimeout)
	for {
		live, zombies, err := workloadTree(roots, keep)
		if err != nil {
			return len(killed), err
		}
		reap(zombies)
		for _, p := range live {
			if err := p.signal(unix.SIGKILL); err == nil {
				killed[p.pid] = true
			}
		}
		// Done when nothing is alive or unreaped outside the roots (the
		// roots are os/exec's to reap).
		if len(live) == 0 && len(zombies) == 0 {
			return len(killed), nil
		}
		if time.Now().After(deadline) {
			return len(killed), fmt.Errorf("%d processes the child left were still alive after %v", len(live), leftoverTimeout)
		}
		<-tick.C
	}
}

// reapOrphans reaps the zombies among the orphans re-parented to this
// process (workloadTree's), never a root or a kept process: os/exec waits
// for those, and a wait here would steal their exit status. For the same
// reason it waits for each zombie by its pid, never for any child (-1).
// It returns how many it reaped.
func reapOrphans(roots []int, keep func(int) bool) int {
	_, zombies, err := workloadTree(roots, keep)
	if err != nil {
		return 0
	}
	return reap(zombies)
}

func reap(zombies []int) int {
	n := 0
	for _, pid := range zombies {
		var ws unix.WaitStatus
		if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid {
			n++
		}
	}
	return n
}
