package supervisor

import (
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

// becomeSubreaper makes orphaned descendants this process's children. It
// is called before the first child starts, so no orphan can escape it.
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// proc is one process as /proc/<pid>/stat shows it.
type proc struct {
	pid, ppid int
	zombie    bool
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
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		out = append(out, proc{pid: pid, ppid: ppid, zombie: f[0] == "Z" || f[0] == "X"})
	}
	return out, nil
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
func workloadTree(roots []int, keep func(int) bool) (live, zombies []int, err error) {
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
			live = append(live, p.pid)
		}
		queue = append(queue, kids[p.pid]...)
	}
	return live, zombies, nil
}

// signalLeftovers sends sig once to every live process of the workload's
// tree (workloadTree). It is the stop's SIGTERM to what left the group.
func signalLeftovers(roots []int, keep func(int) bool, sig unix.Signal) int {
	live, _, _ := workloadTree(roots, keep)
	for _, pid := range live {
		_ = unix.Kill(pid, sig)
	}
	return len(live)
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
		for _, pid := range zombies {
			var ws unix.WaitStatus
			_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
		}
		for _, pid := range live {
			if err := unix.Kill(pid, unix.SIGKILL); err == nil {
				killed[pid] = true
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
