package supervisor

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/api/apitest"
)

// The tests of `run --partitions` run the dispatcher in the test process
// and each partition's supervisor as the test binary with "run" (TestMain),
// against apitest's fake sidecar in partition mode, with real children.

// partitionsClaim is how long each Own of the tests keeps a claim (it is
// renewed every 100 ms): long enough that a supervisor slowed by a loaded
// machine still starts its child well inside it. In CI's unit stage, with
// race-built packages compiling beside it, one took 1.4 s to its first
// answer and 1.7 s more to start its watchdog, and a 2 s claim ran out
// before its child could start.
const partitionsClaim = 5 * time.Second

// startWait bounds the waits for a child to start: not a timing claim, a
// give-up on a loaded machine.
const startWait = 15 * time.Second

// releaseBound bounds how late a partition is released after the event
// that ends its child (a drain, a kill): the supervisor's next read (its
// poll interval, 50 ms), then three steps in a row that may each wake
// late on a loaded machine (the signal's delivery and the child's exit,
// the supervisor's wait and its walk of what the child left, the release
// request), each given schedulingSlack.
const releaseBound = 50*time.Millisecond + 3*schedulingSlack

// renewing keeps renewing partition i's claim in term token, every 100 ms,
// until the returned stop is called.
func renewing(t *testing.T, s *apitest.Sidecar, i int, token int64) (stop func()) {
	s.Own(i, token, partitionsClaim)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if owned(s, i, token) {
					s.Own(i, token, partitionsClaim)
				}
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-stopped }) }
}

// owned reports whether the fake shows partition i owned in term token.
func owned(s *apitest.Sidecar, i int, token int64) bool {
	for _, o := range s.Partitions().Owned {
		if o.Partition == i && o.FencingToken == token {
			return true
		}
	}
	return false
}

type runningPartitions struct {
	signals chan os.Signal
	code    chan int
	log     *syncBuffer
}

// startPartitions runs the dispatcher with the command; flags are the
// supervisors' extra flags.
func startPartitions(t *testing.T, url string, flags []string, command ...string) *runningPartitions {
	t.Helper()
	r := &runningPartitions{signals: make(chan os.Signal, 4), code: make(chan int, 1), log: &syncBuffer{}}
	args := append([]string{"--url=" + url, "--partitions", "--poll-interval=50ms", "--restart-backoff=100ms"}, flags...)
	args = append(append(args, "--"), command...)
	cfg := PartitionsConfig{
		LongPoll: api.NewClient(url, &http.Client{Timeout: time.Minute}),
		Supervise: func(pt PartitionTerm) *exec.Cmd {
			cmd := exec.Command(os.Args[0], append([]string{"run", "--partition-term=" + pt.String()}, args...)...)
			cmd.Stdout, cmd.Stderr = r.log, r.log
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		PollInterval:   50 * time.Millisecond,
		RestartBackoff: 100 * time.Millisecond,
		Signals:        r.signals,
		Stderr:         r.log,
	}
	runInBackground(t, "dispatcher", r.log, r.code, func(ctx context.Context) int { return RunPartitions(ctx, cfg) })
	return r
}

// worker is a child that records "<partition> <partitions> <token> <pid>"
// in dir/started when it starts, and "<partition>" in dir/stopped on
// SIGTERM (then exits); ignoreTerm: it ignores SIGTERM.
func worker(dir string, ignoreTerm bool) []string {
	onTerm := `echo $LEADER_ELECTOR_PARTITION >> ` + dir + `/stopped; exit 0`
	if ignoreTerm {
		onTerm = `echo $LEADER_ELECTOR_PARTITION >> ` + dir + `/stopped`
	}
	return []string{"/bin/sh", "-c", `echo $LEADER_ELECTOR_PARTITION $LEADER_ELECTOR_PARTITIONS $LEADER_ELECTOR_FENCING_TOKEN $$ >> ` + dir + `/started
trap '` + onTerm + `' TERM
while :; do sleep 0.02; done`}
}

// started reads dir/started: partition → its line's fields.
func started(dir string) map[int][]string {
	b, _ := os.ReadFile(filepath.Join(dir, "started"))
	out := map[int][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		i, _ := strconv.Atoi(f[0])
		out[i] = f
	}
	return out
}

func pidOf(t *testing.T, fields []string) int {
	t.Helper()
	pid, err := strconv.Atoi(fields[3])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestRunPartitions: one child per owned partition with its environment;
// a drain SIGTERMs it and its exit releases the partition in its term; a
// claim that is not renewed kills its child by its end, and only that
// child; SIGTERM stops every child and releases every partition.
func TestRunPartitions(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	s := apitest.New(t, apitest.Config{Partitions: 4})
	dir := t.TempDir()
	stop0 := renewing(t, s, 0, 7)
	defer stop0()
	stop2 := renewing(t, s, 2, 3)
	defer stop2()
	stop3 := renewing(t, s, 3, 9)
	defer stop3()
	r := startPartitions(t, s.URL, []string{"--stop-grace=300ms", "--start-delay=0s"}, worker(dir, false)...)

	poll(t, startWait, "a child for each of partitions 0, 2 and 3", func() bool { return len(started(dir)) == 3 })
	st := started(dir)
	for i, token := range map[int]string{0: "7", 2: "3", 3: "9"} {
		if f := st[i]; f[1] != "4" || f[2] != token {
			t.Errorf("partition %d's child got partitions %s, token %s; want 4, %s", i, f[1], f[2], token)
		}
	}

	// A drain: the child is told at once, its exit releases the partition
	// in its term; the others run on.
	s.Drain(2, 5*time.Second)
	poll(t, releaseBound, "partition 2 released after its child's exit", func() bool { return !owned(s, 2, 3) })
	if calls := s.CallsTo(http.MethodPost, "/partitions/2/release"); len(calls) != 1 || calls[0].Query.Get("fencingToken") != "3" {
		t.Errorf("releases of partition 2: %+v, want one, in term 3", calls)
	}
	if alive(pidOf(t, st[2])) {
		t.Errorf("partition 2's child still runs after its release")
	}

	// Partition 3's claim is no longer renewed: its child is dead before
	// the claim's end, and partition 0's is not touched.
	stop3()
	until := s.Partitions().Owned[1].ValidUntil.Time
	pid3 := pidOf(t, st[3])
	poll(t, time.Until(until)+schedulingSlack, "partition 3's child dead", func() bool { return !alive(pid3) })
	for alive(pid3) {
		time.Sleep(time.Millisecond)
	}
	// The watchdog's SIGKILL lands killAhead before the end; a loaded
	// machine may run the check a little late, never the kill.
	if !strings.Contains(readFile(filepath.Join(dir, "stopped")), "3") {
		t.Errorf("partition 3's child was not given SIGTERM before its claim ran out")
	}
	if !alive(pidOf(t, st[0])) {
		t.Fatalf("partition 0's child died with partition 3's claim")
	}

	// A new term of partition 2 gets a new child.
	stop2b := renewing(t, s, 2, 4)
	defer stop2b()
	poll(t, startWait, "a child for partition 2's new term", func() bool { f := started(dir)[2]; return f != nil && f[2] == "4" })

	r.signals <- syscall.SIGTERM
	select {
	case code := <-r.code:
		if code != 0 {
			t.Errorf("the dispatcher exited with %d after SIGTERM, want 0", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the dispatcher did not exit within 5s of SIGTERM")
	}
	for _, i := range []int{0, 2} {
		if pid := pidOf(t, started(dir)[i]); alive(pid) {
			t.Errorf("partition %d's child (pid %d) outlived the dispatcher", i, pid)
		}
	}
	if got := s.Partitions().Owned; len(got) != 0 {
		t.Errorf("owned after the dispatcher's stop: %+v, want every partition released", got)
	}
}

// TestRunPartitionsDrainDeadline: a child that ignores SIGTERM during a
// drain is killed before the drain's deadline, when the sidecar would
// release the partition anyway.
func TestRunPartitionsDrainDeadline(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	s := apitest.New(t, apitest.Config{Partitions: 2})
	dir := t.TempDir()
	stop := renewing(t, s, 1, 2)
	defer stop()
	startPartitions(t, s.URL, []string{"--stop-grace=300ms", "--start-delay=0s"}, worker(dir, true)...)
	poll(t, startWait, "partition 1's child", func() bool { return started(dir)[1] != nil })
	pid := pidOf(t, started(dir)[1])

	const within = 1500 * time.Millisecond
	s.Drain(1, within)
	deadline := s.Partitions().Owned[0].DrainDeadline.Time
	poll(t, time.Until(deadline)+schedulingSlack, "the child killed at the drain's deadline", func() bool { return !alive(pid) })
	if !strings.Contains(readFile(filepath.Join(dir, "stopped")), "1") {
		t.Errorf("the child was not given SIGTERM at the drain's start")
	}
	poll(t, releaseBound, "partition 1 released once its child was killed", func() bool { return !owned(s, 1, 2) })
}

// TestRunPartitionsRefusesALeaderModeSidecar: exit 2 and the reason when
// the sidecar does not serve GET /partitions.
func TestRunPartitionsRefusesALeaderModeSidecar(t *testing.T) {
	// The dispatcher makes its process a subreaper.
	if !inOwnProcess(t) {
		return
	}
	s := apitest.New(t, apitest.Config{})
	var stdout, stderr bytes.Buffer
	code := Main([]string{"--url=" + s.URL, "--partitions", "--", "/bin/true"}, func(string) (string, bool) { return "", false }, &stdout, &stderr)
	if code != ExitBadInput || !strings.Contains(stderr.String(), "does not serve GET /partitions") || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and one line saying the sidecar does not serve GET /partitions", code, stderr.String(), ExitBadInput)
	}
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestRunPartitionsRefusesAStopGraceBeyondTheClaim: exit 2 and one line,
// at the first owned partition's claim, when --stop-grace does not fit in
// the renew deadline; no child starts.
func TestRunPartitionsRefusesAStopGraceBeyondTheClaim(t *testing.T) {
	if !inOwnProcess(t) {
		return
	}
	s := apitest.New(t, apitest.Config{Partitions: 2})
	s.Own(0, 1, 2*time.Second) // renewTime now, validUntil 2 s on: a renew deadline of 2 s
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"--url=" + s.URL, "--partitions", "--stop-grace=2s", "--"}, worker(dir, false)...), func(string) (string, bool) { return "", false }, &stdout, &stderr)
	if code != ExitBadInput || !strings.Contains(stderr.String(), "--stop-grace 2s does not fit in the claim") {
		t.Errorf("exit %d, stderr %q; want %d and the --stop-grace line", code, stderr.String(), ExitBadInput)
	}
	if len(started(dir)) != 0 {
		t.Errorf("a child started: %v", started(dir))
	}
}
