//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/examples/exactlyonce"
	"github.com/leader-elector/leader-elector/test/harness"
)

// TestExactlyOnceWorker runs the exactly-once worker (examples/exactlyonce)
// next to each member of a partition group, as a pod's app container next
// to its sidecar, while the test appends numbered items to every
// partition's stream and drives a join with an acknowledged handover, a
// worker crash, a sidecar crash (restarted with the same name and ports,
// as the kubelet restarts a container), a freeze of a whole pod (SIGSTOP of
// sidecar and worker for longer than the lease), a graceful leave and a
// join of a new pod; then it reshards the group by rolling updates, 16 → 32
// while items flow on all 32 streams, and 32 → 16 the way docs/partitions.md
// says to merge (the streams of the partitions that go away stop first and
// the workers finish them). At the end every item of every partition is in
// the sink exactly once and in order, and the partition monitor has seen no
// partition owned twice. E2E_EXACTLYONCE_ROUNDS repeats the faults (the
// longer run of docs/partitions.md); the default is one round.
func TestExactlyOnceWorker(t *testing.T) {
	rounds := 1
	if v := os.Getenv("E2E_EXACTLYONCE_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("E2E_EXACTLYONCE_ROUNDS=%q: want a whole number ≥ 1", v)
		}
		rounds = n
	}
	start := time.Now()
	e := newExactlyOnce(t)
	pods := []*eoPod{e.startPod(), e.startPod(), e.startPod()}
	e.g.waitFair("exactly-once: 3 pods", start)
	e.appendAll()

	for round := range rounds {
		// A join: the members above their share drain, the workers
		// checkpoint and release.
		began := time.Now()
		pods = append(pods, e.startPod())
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: join 3→4 with app release", round), began)
		e.waitProgress()

		// A worker crashes and its container restarts; its sidecar keeps
		// the partitions meanwhile.
		w := pods[0]
		w.killWorker()
		e.waitAppended(20)
		w.startWorker()
		e.waitProgress()

		// A sidecar crashes and restarts under the same name and ports.
		s := pods[1]
		began = time.Now()
		s.sidecar.signal(syscall.SIGKILL)
		_, _ = s.sidecar.waitExit(giveUp)
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: sidecar SIGKILL 4→3", round), began)
		began = time.Now()
		s.startSidecar()
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: sidecar restarted 3→4", round), began)
		e.waitProgress()

		// A whole pod freezes past its lease: the others take its
		// partitions and fence the sink; when it resumes, its late writes
		// are refused.
		f := pods[2]
		began = time.Now()
		f.sidecar.signal(syscall.SIGSTOP)
		f.signalWorker(syscall.SIGSTOP)
		e.g.setStopped(f.sidecar, true)
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: pod frozen 4→3", round), began)
		e.waitProgress()
		began = time.Now()
		f.signalWorker(syscall.SIGCONT)
		f.sidecar.signal(syscall.SIGCONT)
		e.g.setStopped(f.sidecar, false)
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: pod resumed 3→4", round), began)

		// A graceful leave (SIGTERM of the pod) and a new pod.
		l := pods[3]
		began = time.Now()
		l.stop()
		pods = append(pods[:3], e.startPod())
		e.g.waitFair(fmt.Sprintf("exactly-once round %d: leave and join", round), began)
		e.waitProgress()
		// Next round: the newest pod is the one that crashes first, and
		// the round starts with three pods again (another graceful
		// leave), so that its join is 3→4 as in the first.
		pods = append(pods[3:], pods[:3]...)
		if round < rounds-1 {
			began = time.Now()
			pods[3].stop()
			pods = pods[:3]
			e.g.waitFair(fmt.Sprintf("exactly-once round %d: leave 4→3", round), began)
			e.waitProgress()
		}
	}

	// Split: the streams of 16..31 start to flow, and pile up until the
	// group works with 32. Four pods at N=32 join (the group still works
	// with 16, shared by eight), then the old pods leave.
	e.setFlowing(eoPartitions, eoMaxPartitions, true)
	began := time.Now()
	grown := e.roll(pods, eoMaxPartitions)
	e.g.waitFairN(fmt.Sprintf("exactly-once: reshard %d→%d", eoPartitions, eoMaxPartitions), eoMaxPartitions, began)
	e.waitProgress()

	// Merge: the streams of 16..31 stop and the workers finish them
	// first; then four pods at N=16 join and the pods at 32 leave.
	e.setFlowing(eoPartitions, eoMaxPartitions, false)
	e.waitProgress()
	began = time.Now()
	pods = e.roll(grown, eoPartitions)
	e.g.waitFairN(fmt.Sprintf("exactly-once: reshard %d→%d", eoMaxPartitions, eoPartitions), eoPartitions, began)
	e.waitProgress()

	e.stopAppending()
	e.waitDrained()
	for _, p := range pods {
		p.stop()
	}
	e.check(time.Since(start))
}

// roll replaces old by as many pods at n partitions, as a rolling update
// with maxSurge 100% does: the new pods start and own their share of the
// group's N (the smaller of the two while both run), then the old pods end
// gracefully.
func (e *exactlyOnce) roll(old []*eoPod, n int) []*eoPod {
	e.t.Helper()
	began := time.Now()
	var next []*eoPod
	for range old {
		next = append(next, e.startPodN(n))
	}
	effective := min(n, old[0].partitions)
	e.g.waitFairN(fmt.Sprintf("exactly-once: %d pods at N=%d beside %d at N=%d", len(next), n, len(old), old[0].partitions), effective, began)
	// Only the partitions the group works with make progress.
	want := e.appendedNow()
	for i := effective; i < len(want); i++ {
		want[i] = 0
	}
	e.waitSink(want, fmt.Sprintf("items of partitions 0..%d flow to the sink", effective-1))
	for _, p := range old {
		p.stop()
	}
	return next
}

// eoPartitions is N of the exactly-once test: more than the pods, fewer
// than would slow a race-enabled sidecar. The reshard takes it to
// eoMaxPartitions and back.
const (
	eoPartitions    = partitionCount
	eoMaxPartitions = 2 * eoPartitions
)

type exactlyOnce struct {
	t      *testing.T
	g      *partitionGroup
	worker string
	source string
	sink   *exactlyonce.MemorySink
	// sinkURL serves sink to the workers: a store outside every pod,
	// which no fault of a pod can freeze.
	sinkURL string
	dir     string

	mu       sync.Mutex
	appended [eoMaxPartitions]int64
	// flowing are the streams items are appended to.
	flowing [eoMaxPartitions]bool
	stopApp chan struct{}
	appDone chan struct{}
}

var (
	eoWorkerOnce sync.Once
	eoWorkerBin  string
	eoWorkerErr  error
)

func newExactlyOnce(t *testing.T) *exactlyOnce {
	eoWorkerOnce.Do(func() {
		eoWorkerBin = filepath.Join(filepath.Dir(binary), "exactlyonce")
		eoWorkerErr = harness.BuildBinary(context.Background(), eoWorkerBin, harness.Build{Package: "./examples/exactlyonce/cmd/exactlyonce", Race: true})
	})
	if eoWorkerErr != nil {
		t.Fatalf("build the exactly-once worker: %v", eoWorkerErr)
	}
	// Not t.TempDir: the streams and the workers' logs stay
	// behind for a look when the test fails.
	dir, err := os.MkdirTemp("", "exactlyonce-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("exactly-once: the streams and the workers' logs are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	e := &exactlyOnce{
		t:      t,
		g:      newPartitionGroupN(t, candidateOptions{extraArgs: []string{"--drain-timeout=5s"}}, eoMaxPartitions),
		worker: eoWorkerBin,
		source: filepath.Join(dir, "source"),
		dir:    dir,
	}
	if err := os.MkdirAll(e.source, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range eoMaxPartitions {
		if err := os.WriteFile(exactlyonce.SourcePath(e.source, i), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.setFlowing(0, eoPartitions, true)
	e.sink = exactlyonce.NewMemorySink()
	srv := httptest.NewServer(e.sink.Handler())
	t.Cleanup(srv.Close)
	e.sinkURL = srv.URL
	return e
}

// eoItem is item n of partition i as the source holds it (and, the worker
// processing items as they are, the sink).
func eoItem(i int, n int64) string { return fmt.Sprintf("p%d-item-%d", i, n) }

// eoAppendEvery is how often one item is appended to every partition: 10
// items per second per partition, 160 in all, which the race-enabled
// workers apply (about 1 ms each, a lock and three file writes, and a
// checkpoint every 10) with room to spare on a busy two-core machine.
const eoAppendEvery = 100 * time.Millisecond

// setFlowing starts (or stops) appending items to the streams from..to-1.
func (e *exactlyOnce) setFlowing(from, to int, on bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := from; i < to; i++ {
		e.flowing[i] = on
	}
}

// appendAll appends one item to every flowing partition's stream every
// eoAppendEvery until stopAppending: the source the workers do not
// control.
func (e *exactlyOnce) appendAll() {
	e.stopApp, e.appDone = make(chan struct{}), make(chan struct{})
	files := make([]*os.File, eoMaxPartitions)
	for i := range files {
		f, err := os.OpenFile(exactlyonce.SourcePath(e.source, i), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			e.t.Fatal(err)
		}
		files[i] = f
	}
	go func() {
		defer close(e.appDone)
		tick := time.NewTicker(eoAppendEvery)
		defer tick.Stop()
		for {
			select {
			case <-e.stopApp:
				for _, f := range files {
					f.Close()
				}
				return
			case <-tick.C:
			}
			for i, f := range files {
				e.mu.Lock()
				n, flowing := e.appended[i]+1, e.flowing[i]
				e.mu.Unlock()
				if !flowing {
					continue
				}
				// One write per line: an O_APPEND write of a few bytes
				// lands whole.
				if _, err := f.WriteString(eoItem(i, n) + "\n"); err != nil {
					e.t.Errorf("append to partition %d: %v", i, err)
					return
				}
				e.mu.Lock()
				e.appended[i] = n
				e.mu.Unlock()
			}
		}
	}()
	e.t.Cleanup(e.stopAppending)
}

func (e *exactlyOnce) stopAppending() {
	if e.stopApp == nil {
		return
	}
	select {
	case <-e.stopApp:
	default:
		close(e.stopApp)
	}
	<-e.appDone
}

func (e *exactlyOnce) appendedNow() [eoMaxPartitions]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.appended
}

// waitAppended waits until n more items were appended to each partition.
func (e *exactlyOnce) waitAppended(n int64) {
	e.t.Helper()
	from := e.appendedNow()[0]
	if err := wait.PollUntilContextTimeout(context.Background(), pollInterval, time.Minute, true, func(context.Context) (bool, error) {
		return e.appendedNow()[0] >= from+n, nil
	}); err != nil {
		e.t.Fatal("the source stopped growing")
	}
}

// waitProgress waits until the sink has caught up with what was appended
// when it was called: every partition is being processed.
func (e *exactlyOnce) waitProgress() {
	e.t.Helper()
	e.waitSink(e.appendedNow(), "items flow to the sink")
}

// waitDrained waits until the sink has every item appended.
func (e *exactlyOnce) waitDrained() {
	e.t.Helper()
	e.waitSink(e.appendedNow(), "every item reaches the sink")
}

func (e *exactlyOnce) waitSink(want [eoMaxPartitions]int64, what string) {
	e.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, settleBound+30*time.Second, true, func(context.Context) (bool, error) {
		for i := range eoMaxPartitions {
			if st := e.sink.State(i); st.Offset < want[i] {
				last = fmt.Sprintf("partition %d: sink at %d, want %d", i, st.Offset, want[i])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("%s: %v (%s)", what, err, last)
	}
}

// check reads the sink: every item exactly once, in order, none lost, and
// the tokens that wrote them only growing.
func (e *exactlyOnce) check(took time.Duration) {
	e.t.Helper()
	appended := e.appendedNow()
	var items, refused, terms int64
	for i := range eoMaxPartitions {
		res, st := e.sink.Results(i), e.sink.State(i)
		if int64(len(res)) != appended[i] {
			e.t.Errorf("partition %d: %d results in the sink, %d items appended", i, len(res), appended[i])
		}
		var token int64
		for k, r := range res {
			if want := int64(k + 1); r.Offset != want || r.Value != eoItem(i, want) {
				e.t.Errorf("partition %d: result %d is offset %d %q, want offset %d %q", i, k, r.Offset, r.Value, want, eoItem(i, want))
				break
			}
			if r.Token < token {
				e.t.Errorf("partition %d: offset %d written under token %d after token %d", i, r.Offset, r.Token, token)
			}
			if r.Token != token {
				terms++
			}
			token = r.Token
		}
		items += int64(len(res))
		refused += st.Refused
	}
	e.t.Logf("MEASURED exactly-once worker: %d items over %d partitions (%d, then %d, then %d) in %v, each in the sink exactly once and in order; %d owner terms wrote to the sink; %d writes refused for a stale fencing token", items, eoMaxPartitions, eoPartitions, eoMaxPartitions, eoPartitions, took.Round(time.Second), terms, refused)
}

// eoPod is one pod of the group: a sidecar and the worker next to it.
type eoPod struct {
	e       *exactlyOnce
	name    string
	ports   []int
	sidecar *candidate
	// partitions is the sidecar's N.
	partitions int

	worker     *exec.Cmd
	workerDone chan struct{}
	// stopping is set when the test ends the worker; a worker that exits
	// by itself fails the test.
	stopping bool
}

func (e *exactlyOnce) startPod() *eoPod { return e.startPodN(eoPartitions) }

// startPodN starts a pod whose sidecar has n partitions.
func (e *exactlyOnce) startPodN(n int) *eoPod {
	e.g.mu.Lock()
	name := fmt.Sprintf("%s-%d", e.g.lease, e.g.next)
	e.g.next++
	e.g.mu.Unlock()
	ports, err := harness.FreePorts(2)
	if err != nil {
		e.t.Fatal(err)
	}
	p := &eoPod{e: e, name: name, ports: ports, partitions: n}
	p.startSidecar()
	p.startWorker()
	return p
}

// startSidecar starts (or restarts) the pod's sidecar on its ports.
func (p *eoPod) startSidecar() {
	o := p.e.g.opts
	o.ports = p.ports
	// The last --partitions wins.
	o.extraArgs = append(slices.Clone(o.extraArgs), fmt.Sprintf("--partitions=%d", p.partitions))
	c := startCandidate(p.e.t, p.name, o)
	p.e.g.mu.Lock()
	p.e.g.members = append(p.e.g.members, c)
	p.e.g.mu.Unlock()
	p.sidecar = c
}

// startWorker starts (or restarts) the pod's worker.
func (p *eoPod) startWorker() {
	t := p.e.t
	logf, err := os.OpenFile(filepath.Join(p.e.dir, p.name+"-worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.e.worker,
		"--sidecar="+p.sidecar.apiURL,
		"--source="+p.e.source,
		"--sink="+p.e.sinkURL,
		"--checkpoint-every=10")
	cmd.Env = harness.CleanEnv()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p.worker, p.workerDone, p.stopping = cmd, done, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		if !p.isStopping(cmd) {
			t.Errorf("%s's worker exited by itself: %v\n%s", p.name, err, harness.TailFile(logf.Name(), 30))
		} else if err != nil && cmd.ProcessState.ExitCode() > 0 {
			t.Errorf("%s's worker: %v\n%s", p.name, err, harness.TailFile(logf.Name(), 30))
		}
		if strings.Contains(harness.TailFile(logf.Name(), 1000), "WARNING: DATA RACE") {
			t.Errorf("%s's worker: the race detector reported a data race", p.name)
		}
		close(done)
	}()
	t.Cleanup(func() {
		p.markStopping(cmd)
		_ = cmd.Process.Kill()
		<-done
	})
}

var eoMu sync.Mutex

func (p *eoPod) isStopping(cmd *exec.Cmd) bool {
	eoMu.Lock()
	defer eoMu.Unlock()
	return p.worker != cmd || p.stopping
}

func (p *eoPod) markStopping(cmd *exec.Cmd) {
	eoMu.Lock()
	defer eoMu.Unlock()
	if p.worker == cmd {
		p.stopping = true
	}
}

func (p *eoPod) signalWorker(sig syscall.Signal) {
	if err := p.worker.Process.Signal(sig); err != nil {
		p.e.t.Fatal(err)
	}
}

// killWorker crashes the worker (SIGKILL).
func (p *eoPod) killWorker() {
	p.markStopping(p.worker)
	p.signalWorker(syscall.SIGKILL)
	<-p.workerDone
}

// stop ends the pod gracefully: SIGTERM to both; the worker must exit 0.
func (p *eoPod) stop() {
	p.markStopping(p.worker)
	p.signalWorker(syscall.SIGTERM)
	if p.sidecar.running() {
		p.sidecar.signal(syscall.SIGTERM)
		_, _ = p.sidecar.waitExit(giveUp)
	}
	select {
	case <-p.workerDone:
	case <-time.After(giveUp):
		p.e.t.Errorf("%s's worker did not stop within 10s of SIGTERM", p.name)
	}
	if code := p.worker.ProcessState.ExitCode(); code != 0 {
		p.e.t.Errorf("%s's worker exited %d after SIGTERM", p.name, code)
	}
}
