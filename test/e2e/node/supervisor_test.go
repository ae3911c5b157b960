//go:build integration

package node_test

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"golang.org/x/sys/unix"

	"github.com/leader-elector/leader-elector/test/node"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestChartSupervisor installs the chart with supervisor.enabled: the demo
// app's singleton work runs under `leader-elector run` in each of three
// pods. The evidence is process state on the node, read from outside the
// pods: every 5 ms the monitor lists /proc, recognises the supervised
// children (a `/bin/sh -c` running the demo's work whose parent is
// `leader-elector run`), maps each to its pod by its cgroup, and records any
// sample in which two children are alive and not frozen. Across a deletion
// of the leader pod, a SIGKILL of its sidecar and a freeze of the whole pod,
// each new child must start after the old one died; the margins are
// reported. The freeze is the documented residual window: the frozen child
// is alive (not running) while the new one starts, and on thaw it runs until
// its watchdog's SIGKILL lands; that time is measured.
func TestChartSupervisor(t *testing.T) {
	d := deployChart(t, "supervisor.enabled=true", "supervisor.stopGrace=500ms", "demo.replicas=3",
		"election.leaseDurationSeconds=4", "election.renewDeadlineSeconds=2", "election.retryPeriodSeconds=1")
	m := startNodeChildMonitor(t)

	// Later steps assume the earlier ones left one child running.
	run := func(name string, f func(*testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	run("DeleteLeaderPod", func(t *testing.T) {
		pod := d.faultReadyLeader(t)
		old := m.waitChildIn(t, pod, nil)
		fault := bootNow()
		if err := d.client.CoreV1().Pods(d.namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		leader := d.waitSettledExcept(t, d.settleTimeout(), pod.Name)
		next := m.waitChildIn(t, d.getPod(t, leader), &old)
		dead := m.waitDead(t, old.pid, d.settleTimeout())
		d.reportMargin(t, "delete of the leader pod", pod.Name, leader, fault, dead, next)
	})

	run("KillSidecar", func(t *testing.T) {
		pod := d.faultReadyLeader(t)
		old := m.waitChildIn(t, pod, nil)
		term := d.term(t)
		fault := bootNow()
		if _, err := theNode.KillContainer(context.Background(), containerID(t, pod, packaging.SidecarName)); err != nil {
			t.Fatal(err)
		}
		// The restarted sidecar or another pod leads at the Lease's expiry:
		// until the new term the killed pod may still look settled.
		dead := m.waitDead(t, old.pid, d.settleTimeout())
		d.waitNewTerm(t, term)
		leader := d.waitSettled(t, d.settleTimeout())
		next := m.waitChildIn(t, d.getPod(t, leader), &old)
		d.reportMargin(t, "SIGKILL of the leader's sidecar", pod.Name, leader, fault, dead, next)
	})

	run("FreezeLeaderPod", func(t *testing.T) {
		pod := d.faultReadyLeader(t)
		old := m.waitChildIn(t, pod, nil)
		before := m.twoAliveSamples()
		fault := bootNow()
		if err := theNode.FreezePod(string(pod.UID)); err != nil {
			t.Fatal(err)
		}
		thawed := false
		defer func() {
			if !thawed {
				_ = theNode.ThawPod(string(pod.UID))
			}
		}()
		// The child stopped running once the freezer says FROZEN
		// (FreezePod returns then; the child's own cgroup says it too): a
		// time no earlier than the truth.
		var frozenAt time.Duration
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, nodeGiveUp, true, func(context.Context) (bool, error) {
			_, frozen, err := node.ProcessCgroup(old.pid)
			frozenAt = bootNow()
			return frozen, err
		}); err != nil {
			t.Fatalf("the leader pod %s never froze: %v", pod.Name, err)
		}
		leader := d.waitSettledExcept(t, d.settleTimeout(), pod.Name)
		next := m.waitChildIn(t, d.getPod(t, leader), &old)
		// The frozen child is alive — as a process — next to the new one:
		// the monitor must see both, or it could not see an overlap at all.
		if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, nodeGiveUp, true, func(context.Context) (bool, error) {
			return m.twoAliveSamples() > before, nil
		}); err != nil {
			t.Fatalf("the monitor never saw the frozen child %d and the new child %d alive together: it cannot see an overlap", old.pid, next.pid)
		}
		thaw := bootNow() // before the write: no later than the child can run again
		if err := theNode.ThawPod(string(pod.UID)); err != nil {
			t.Fatal(err)
		}
		thawed = true
		dead := m.waitDead(t, old.pid, nodeGiveUp)
		residual := dead.dead - thaw
		t.Logf("MEASURED supervisor on the node: freeze of the leader pod %s: frozen %v after the fault; new child %d in %s started %v after the old child stopped running (frozen); on thaw the old child %d was seen dead %v after the thaw (the residual window, an upper bound: first sample that saw it dead); %d samples saw both running",
			pod.Name, (frozenAt - fault).Round(time.Millisecond), next.pid, leader, (next.start - frozenAt).Round(time.Millisecond), old.pid, residual.Round(time.Millisecond), m.runningOverlapsAfter(thaw))
		if next.start <= frozenAt {
			t.Errorf("the new child started at %v, before the old one was frozen at %v", next.start, frozenAt)
		}
		// The watchdog's timer expired during the freeze: it kills at once.
		if residual > residualWindow {
			t.Errorf("the thawed child ran %v after the thaw, want its watchdog's kill at once", residual)
		}
		m.excuse(old.pid, frozenAt, dead.dead)
	})

	m.check(t, 4) // one per fault and the first
}

// getPod reads a pod by name.
func (d *deployment) getPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	p, err := d.client.CoreV1().Pods(d.namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// reportMargin logs and checks the margin between the old child's death
// and the new child's start: the start is the kernel's (rounded down to
// 10 ms, earlier than the truth), the death the first sample that found it
// dead (later than the truth), so the margin is a lower bound.
func (d *deployment) reportMargin(t *testing.T, fault, oldPod, newPod string, at time.Duration, old, next nodeChild) {
	t.Helper()
	margin := next.start - old.dead
	t.Logf("MEASURED supervisor on the node: %s %s: old child %d dead %v after the fault; new child %d in %s started %v after it (margin)",
		fault, oldPod, old.pid, (old.dead - at).Round(time.Millisecond), next.pid, newPod, margin.Round(time.Millisecond))
	if margin <= 0 {
		t.Errorf("%s: the new child %d started %v before the old child %d was seen dead", fault, next.pid, -margin, old.pid)
	}
}

func bootNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	return time.Duration(ts.Nano())
}

// nodeChild is one supervised child as the monitor saw it: its pid, its
// pod's uid, its partition (in partition mode; "" in leader mode), its
// kernel start time and the first sample that found it dead (both on
// CLOCK_BOOTTIME, the clock of /proc/<pid>/stat).
type nodeChild struct {
	pid   int
	key   string
	pod   string
	start time.Duration
	dead  time.Duration // 0 while alive
}

// nodeChildMonitor watches every process on the node (the test shares the
// host's pid namespace) for supervised children: processes isWork
// recognises whose parent is `leader-elector run`. Children of one key (in
// partition mode the partition their supervisor's --partition-term names;
// in leader mode all of them) must never run at once.
type nodeChildMonitor struct {
	isWork func(argv []string) bool
	mu     sync.Mutex
	// seen classifies the pids listed: true for a supervised child.
	seen map[int]bool
	kids map[int]*nodeChild
	// twoAlive counts samples with two children of one key alive, frozen
	// or not; running lists those with two alive and not frozen.
	twoAlive int
	running  []runningOverlap
	// excused: a frozen child's overlap, from its freeze to its death,
	// checked and measured by the freeze step.
	excused       map[int][2]time.Duration
	stop, stopped chan struct{}
}

type runningOverlap struct {
	at   time.Duration
	pids []int
}

// startNodeChildMonitor watches the chart demo's supervised work (leader
// mode).
func startNodeChildMonitor(t *testing.T) *nodeChildMonitor { return startChildMonitor(t, isDemoWork) }

func startChildMonitor(t *testing.T, isWork func(argv []string) bool) *nodeChildMonitor {
	m := &nodeChildMonitor{isWork: isWork, seen: map[int]bool{}, kids: map[int]*nodeChild{}, excused: map[int][2]time.Duration{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
	go m.run()
	t.Cleanup(func() { close(m.stop); <-m.stopped })
	return m
}

func (m *nodeChildMonitor) run() {
	defer close(m.stopped)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		m.sample()
	}
}

// argv reads a process's command line.
func argv(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// isDemoWork: `/bin/sh -c <the chart demo's singleton work>`.
func isDemoWork(a []string) bool {
	return len(a) >= 3 && a[0] == "/bin/sh" && a[1] == "-c" && strings.Contains(a[2], "doing the singleton work")
}

func isSupervisor(a []string) bool {
	return len(a) >= 2 && strings.HasSuffix(a[0], "/leader-elector") && a[1] == "run"
}

// partitionOf is the partition a supervisor's --partition-term=P@T names
// (the one `run --partitions` starts per owned partition), "" for none.
func partitionOf(supervisor []string) string {
	for _, a := range supervisor {
		if v, ok := strings.CutPrefix(a, "--partition-term="); ok {
			p, _, _ := strings.Cut(v, "@")
			return p
		}
	}
	return ""
}

func (m *nodeChildMonitor) sample() {
	dir, err := os.Open("/proc")
	if err != nil {
		return
	}
	entries, _ := dir.Readdirnames(-1)
	_ = dir.Close()
	now := bootNow()
	m.mu.Lock()
	defer m.mu.Unlock()
	listed := make(map[int]bool, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e)
		if err != nil {
			continue
		}
		listed[pid] = true
		if _, ok := m.seen[pid]; ok {
			continue
		}
		a := argv(pid)
		if a == nil {
			continue
		}
		alive, ppid, start := procStat(pid)
		parent := argv(ppid)
		child := m.isWork(a) && isSupervisor(parent)
		// Not classified for good: the supervisor's fork before its exec
		// (the supervisor's command line), and a process in the middle of
		// an exec (an empty command line).
		if !isSupervisor(a) && a[0] != "" {
			m.seen[pid] = child
		}
		if !child || !alive {
			continue
		}
		// Only children in a pod: the node's processes share the machine.
		if uid, _, _ := node.ProcessCgroup(pid); uid != "" {
			m.kids[pid] = &nodeChild{pid: pid, pod: uid, key: partitionOf(parent), start: start}
		}
	}
	for pid := range m.seen {
		if !listed[pid] {
			delete(m.seen, pid)
		}
	}
	alive, running := map[string]int{}, map[string][]int{}
	for _, k := range m.kids {
		if k.dead != 0 {
			continue
		}
		if ok, _, _ := procStat(k.pid); !ok || !listed[k.pid] {
			k.dead = now
			continue
		}
		alive[k.key]++
		if _, frozen, err := node.ProcessCgroup(k.pid); err != nil || !frozen {
			running[k.key] = append(running[k.key], k.pid)
		}
	}
	for _, n := range alive {
		if n > 1 {
			m.twoAlive++
			break
		}
	}
	for _, pids := range running {
		if len(pids) > 1 {
			slices.Sort(pids)
			m.running = append(m.running, runningOverlap{at: now, pids: pids})
		}
	}
}

// procStat reads /proc/<pid>/stat: alive (not gone, not a zombie), the
// parent's pid, the start time since boot (clock ticks of 10 ms: USER_HZ
// is 100 on Linux).
func procStat(pid int) (alive bool, ppid int, start time.Duration) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false, 0, 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false, 0, 0
	}
	// fields[0] is field 3 (state), fields[1] field 4 (ppid), fields[19]
	// field 22 (starttime).
	fields := strings.Fields(s[i+2:])
	if len(fields) < 20 {
		return false, 0, 0
	}
	ppid, _ = strconv.Atoi(fields[1])
	ticks, _ := strconv.ParseInt(fields[19], 10, 64)
	return fields[0] != "Z" && fields[0] != "X", ppid, time.Duration(ticks) * 10 * time.Millisecond
}

// count is how many supervised children the monitor has seen.
func (m *nodeChildMonitor) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.kids)
}

func (m *nodeChildMonitor) twoAliveSamples() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.twoAlive
}

func (m *nodeChildMonitor) runningOverlapsAfter(at time.Duration) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, o := range m.running {
		if o.at >= at {
			n++
		}
	}
	return n
}

// excuse marks pid's life from from to to as the frozen child's, checked
// by the freeze step: it may overlap the next child's.
func (m *nodeChildMonitor) excuse(pid int, from, to time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.excused[pid] = [2]time.Duration{from, to}
}

// waitChildIn waits for a live supervised child in pod other than not and
// returns it.
func (m *nodeChildMonitor) waitChildIn(t *testing.T, pod *corev1.Pod, not *nodeChild) nodeChild {
	t.Helper()
	var found nodeChild
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		for _, k := range m.kids {
			if k.dead == 0 && k.pod == string(pod.UID) && (not == nil || k.pid != not.pid) {
				found = *k
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no supervised child running in %s within a minute", pod.Name)
	}
	return found
}

// waitDead waits until the monitor has seen pid dead.
func (m *nodeChildMonitor) waitDead(t *testing.T, pid int, timeout time.Duration) nodeChild {
	t.Helper()
	var k nodeChild
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		k = *m.kids[pid]
		return k.dead != 0, nil
	})
	if err != nil {
		t.Fatalf("child %d still alive after %v", pid, timeout)
	}
	return k
}

// check fails the test on any sample with two children of one key running
// (alive, not frozen), on any two children of one key whose lives overlap,
// but for a frozen child's excused overlap (measured by the freeze step),
// and on fewer than minKids children seen in all (the run did not do what
// it was to check).
func (m *nodeChildMonitor) check(t *testing.T, minKids int) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	inExcuse := func(pid int, at time.Duration) bool {
		e, ok := m.excused[pid]
		return ok && at >= e[0] && at <= e[1]
	}
	var overlaps []runningOverlap
	for _, o := range m.running {
		if !slices.ContainsFunc(o.pids, func(pid int) bool { return inExcuse(pid, o.at) }) {
			overlaps = append(overlaps, o)
		}
	}
	for i, o := range overlaps {
		if i == 5 {
			t.Errorf("… %d samples in all with two children running", len(overlaps))
			break
		}
		t.Errorf("two supervised children running at once at %v: pids %v", o.at, o.pids)
	}
	byKey := map[string][]*nodeChild{}
	for _, k := range m.kids {
		byKey[k.key] = append(byKey[k.key], k)
	}
	for key, kids := range byKey {
		slices.SortFunc(kids, func(a, b *nodeChild) int { return int(a.start - b.start) })
		for i := 1; i < len(kids); i++ {
			prev, next := kids[i-1], kids[i]
			if inExcuse(prev.pid, next.start) {
				continue
			}
			if prev.dead == 0 || prev.dead > next.start {
				t.Errorf("child %d (pod %s%s) started at %v while child %d (pod %s) had not been seen dead (%v)", next.pid, next.pod, partitionNote(key), next.start, prev.pid, prev.pod, prev.dead)
			}
		}
	}
	t.Logf("the monitor saw %d supervised children in all", len(m.kids))
	if len(m.kids) < minKids {
		t.Errorf("the monitor saw %d supervised children, want at least %d", len(m.kids), minKids)
	}
}

// partitionNote names a child's partition in a message, if it has one.
func partitionNote(key string) string {
	if key == "" {
		return ""
	}
	return ", partition " + key
}
