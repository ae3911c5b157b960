//go:build integration

package node_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/examples/exactlyonce"
	"github.com/leader-elector/leader-elector/test/node"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// The streams of TestPartitionsSupervisorRollout: long enough to be
// consumed through the whole rollout (the test fails if one ends first),
// short enough to finish soon after.
const (
	eoRolloutItems     = 5000
	eoRolloutItemDelay = 10 * time.Millisecond
	eoRolloutReplicas  = 3
)

// TestPartitionsSupervisorRollout rolls out manifests/example-partitions-
// supervisor as shipped — its strategy, timings and RBAC; 3 replicas — with
// its work replaced by the exactly-once worker (examples/exactlyonce
// --supervised): `leader-elector run --partitions` starts one worker per
// partition its pod owns, each of which consumes its partition's stream (a
// ConfigMap the pods mount) into a fenced sink (this process, on the node's
// address), checkpoints with the sidecar, and on SIGTERM (a drain, or its
// pod's end) stores a last checkpoint and exits, after which its supervisor
// hands the partition over. While every partition is being consumed, a
// `kubectl rollout restart` replaces all three pods. Checked: every item
// of every partition is in the sink exactly once and in order, and the
// tokens that wrote them only grow; no partition ever had two workers
// alive at once (process state on the node, every 5 ms) nor two claims in
// the sidecars' answers; every pod was replaced while items flowed. The
// longest pause in each partition's consumption is measured.
func TestPartitionsSupervisorRollout(t *testing.T) {
	ctx := context.Background()
	sink := exactlyonce.NewMemorySink()
	// On the node's address: the pods reach it through their gateway.
	ln, err := net.Listen("tcp", net.JoinHostPort(node.Address, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: sink.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	objs, err := packaging.KustomizeExampleWithImage(ctx, "example-partitions-supervisor", nodeImage)
	if err != nil {
		t.Fatal(err)
	}
	objs, partitions, err := workOnStreams(objs, "http://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	d := deploy(t, "manifests/example-partitions-supervisor with the exactly-once worker", objs)
	m := startChildMonitor(t, isExactlyOnceWorker)

	offsets := func() []int64 {
		out := make([]int64, partitions)
		for i := range out {
			out[i] = sink.State(i).Offset
		}
		return out
	}
	waitOffsets := func(what string, timeout time.Duration, done func(int64) bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
			return !slices.ContainsFunc(offsets(), func(o int64) bool { return !done(o) }), nil
		}); err != nil {
			t.Fatalf("%s within %v: the sink's offsets are %v", what, timeout, offsets())
		}
	}
	// Every partition consumed, and each pod has its share.
	waitOffsets("not every partition consumed", 2*time.Minute, func(o int64) bool { return o >= 100 })
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ok, err := d.partitionsSettled(ctx, partitions)
		return ok && err == nil, nil
	}); err != nil {
		t.Fatalf("the %d partitions not shared fairly among the pods within 2 minutes", partitions)
	}
	r, stopPolling := pollClaims(t, d)
	pauses := watchProgress(t, offsets)
	// What the supervisor costs, per pod: with 3 pods on 4 partitions one
	// pod runs 2 partitions' supervisors, the others 1.
	for uid, mem := range runMemory() {
		t.Logf("MEASURED leader-elector run --partitions in pod %s: %d partition supervisors, %d processes of the binary (the dispatcher, a supervisor and a watchdog per partition), %.1f MiB proportional set size (Pss) in all",
			uid[:8], mem.partitions, mem.procs, float64(mem.pssKiB)/1024)
	}

	before, err := d.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restarted := d.rolloutRestart(t)
	var rolledOut time.Duration
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		dep, err := d.client.AppsV1().Deployments(d.namespace).Get(ctx, d.deployment, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pods, err := d.pods(ctx)
		if err != nil {
			return false, nil
		}
		old := slices.ContainsFunc(pods, func(p corev1.Pod) bool {
			return slices.ContainsFunc(before, func(b corev1.Pod) bool { return b.UID == p.UID })
		})
		s := dep.Status
		rolledOut = time.Since(restarted)
		return s.ObservedGeneration >= dep.Generation && s.UpdatedReplicas == eoRolloutReplicas && s.Replicas == eoRolloutReplicas &&
			s.AvailableReplicas == eoRolloutReplicas && len(pods) == eoRolloutReplicas && !old, nil
	}); err != nil {
		t.Fatalf("the rollout did not finish within 4 minutes (the sink's offsets: %v)", offsets())
	}
	atRolledOut := offsets()
	for i, o := range atRolledOut {
		if o >= eoRolloutItems {
			t.Fatalf("partition %d's stream was consumed to its end (%d items) before the rollout finished: the rollout did not happen while items flowed; make the streams longer", i, o)
		}
	}
	// The rest of the streams: at most every item's delay, twice over,
	// and a minute for the sink's round trips and the last handovers.
	waitOffsets("the streams not consumed to their end", 2*eoRolloutItems*eoRolloutItemDelay+nodeGiveUp, func(o int64) bool { return o >= eoRolloutItems })
	stopPolling()
	longest := pauses.stop()

	var terms, refused int64
	for i := range partitions {
		res, st := sink.Results(i), sink.State(i)
		if len(res) != eoRolloutItems {
			t.Errorf("partition %d: %d results in the sink, %d items in the stream", i, len(res), eoRolloutItems)
		}
		var token int64
		for k, res := range res {
			if want := int64(k + 1); res.Offset != want || res.Value != rolloutItem(i, want) {
				t.Errorf("partition %d: result %d is offset %d %q, want offset %d %q", i, k, res.Offset, res.Value, want, rolloutItem(i, want))
				break
			}
			if res.Token < token {
				t.Errorf("partition %d: offset %d written under token %d after token %d", i, res.Offset, res.Token, token)
			}
			if res.Token != token {
				terms++
			}
			token = res.Token
		}
		refused += st.Refused
	}
	rep := r.parts.Check(partitions)
	for _, v := range rep.Violations {
		t.Errorf("VIOLATION %s", v)
	}
	if rep.Claims == 0 {
		t.Errorf("the claim pollers saw no claim (%d answers): the check could not fail", rep.Observations)
	}
	// Each partition moved at least once (its first owner was replaced):
	// two workers per partition at least.
	m.check(t, 2*partitions)
	t.Logf("MEASURED partition example with the supervisor, rolled out (%d pods, the example's strategy and timings, %d partitions, %d items each at %v per item): rollout finished %v after the restart, with the sink at %v; every item in the sink exactly once and in order; %d owner terms wrote to it, %d writes refused for a stale token; longest pause in consumption per partition %v; %d claims in %d sidecar answers, %d violations; %d workers in all",
		eoRolloutReplicas, partitions, eoRolloutItems, eoRolloutItemDelay, rolledOut.Round(100*time.Millisecond), atRolledOut, terms, refused, longest, rep.Claims, rep.Observations, len(rep.Violations), m.count())
}

// isExactlyOnceWorker: the exactly-once worker as a supervised child.
func isExactlyOnceWorker(a []string) bool {
	return len(a) >= 2 && a[0] == "/exactlyonce" && slices.Contains(a, "--supervised")
}

func rolloutItem(partition int, offset int64) string {
	return fmt.Sprintf("p%d-item-%d", partition, offset)
}

// workOnStreams makes the example's Deployment run the exactly-once worker
// under its supervisor, on streams in a ConfigMap it adds, into the sink
// at sinkURL; it returns the objects and the partition count.
func workOnStreams(objs packaging.Objects, sinkURL string) (packaging.Objects, int, error) {
	u, err := objs.One("Deployment")
	if err != nil {
		return nil, 0, err
	}
	var dep appsv1.Deployment
	if err := packaging.Into(u, &dep); err != nil {
		return nil, 0, err
	}
	sidecar, _, err := packaging.Sidecar(&dep.Spec.Template.Spec)
	if err != nil {
		return nil, 0, err
	}
	n := 0
	if v, ok := packaging.FlagValue(sidecar.Args, "partitions"); !ok {
		return nil, 0, fmt.Errorf("the example's sidecar has no --partitions: %v", sidecar.Args)
	} else if _, err := fmt.Sscan(v, &n); err != nil || n < 1 {
		return nil, 0, fmt.Errorf("--partitions=%q", v)
	}
	spec := &dep.Spec.Template.Spec
	app := &spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })]
	// The example's supervisor, as shipped: `... run <flags> --partitions
	// -- <work>`; the work becomes the worker.
	run := slices.Index(app.Args, "/leader-elector-run/leader-elector")
	sep := slices.Index(app.Args, "--")
	if run < 0 || sep < run {
		return nil, 0, fmt.Errorf("the example's app does not run its work under the supervisor: %v", app.Args)
	}
	app.Image = exactlyOnceImage
	app.Command = slices.Clone(app.Args[run : run+1])
	app.Args = append(slices.Clone(app.Args[run+1:sep+1]), "/exactlyonce", "--supervised", "--source=/streams", "--sink="+sinkURL,
		"--checkpoint-every=100", "--item-delay="+eoRolloutItemDelay.String())
	app.Ports = nil
	// The example's limits are for its shell loop; here the container
	// holds a supervisor and a worker per owned partition.
	app.Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("256Mi")}
	app.VolumeMounts = append(app.VolumeMounts, corev1.VolumeMount{Name: "streams", MountPath: "/streams", ReadOnly: true})
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "streams", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "streams"}}}})
	replicas := int32(eoRolloutReplicas)
	dep.Spec.Replicas = &replicas
	if u.Object, err = k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&dep); err != nil {
		return nil, 0, err
	}
	streams := corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "streams", Namespace: dep.Namespace},
		Data:       map[string]string{},
	}
	for i := range n {
		var b strings.Builder
		for k := int64(1); k <= eoRolloutItems; k++ {
			b.WriteString(rolloutItem(i, k) + "\n")
		}
		// The worker reads exactlyonce.SourcePath(dir, i): its base name
		// is the key.
		streams.Data[exactlyonce.SourcePath("", i)] = b.String()
	}
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(&streams)
	if err != nil {
		return nil, 0, err
	}
	// Before the Deployment: its pods mount it.
	return slices.Insert(objs, slices.Index(objs, u), &unstructured.Unstructured{Object: m}), n, nil
}

// progress samples the sink's offsets every 50 ms and keeps, per
// partition, the longest time they did not move before the stream's end.
type progress struct {
	stopOnce  sync.Once
	stopCh    chan struct{}
	done      chan struct{}
	longestBy []time.Duration
}

func watchProgress(t *testing.T, offsets func() []int64) *progress {
	p := &progress{stopCh: make(chan struct{}), done: make(chan struct{})}
	last := offsets()
	p.longestBy = make([]time.Duration, len(last))
	go func() {
		defer close(p.done)
		since := make([]time.Time, len(last))
		for i := range since {
			since[i] = time.Now()
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stopCh:
				return
			case <-tick.C:
			}
			now := time.Now()
			for i, o := range offsets() {
				if o != last[i] {
					p.longestBy[i] = max(p.longestBy[i], now.Sub(since[i]))
					last[i], since[i] = o, now
				} else if o >= eoRolloutItems {
					since[i] = now // done: not a pause
				}
			}
		}
	}()
	t.Cleanup(func() { p.stop() })
	return p
}

// stop ends the sampling and returns the longest pause per partition.
func (p *progress) stop() []time.Duration {
	p.stopOnce.Do(func() { close(p.stopCh); <-p.done })
	out := make([]time.Duration, len(p.longestBy))
	for i, d := range p.longestBy {
		out[i] = d.Round(10 * time.Millisecond)
	}
	return out
}

// podRunMemory is what the copied leader-elector binary's processes in one
// pod hold: the dispatcher, and per owned partition a supervisor and its
// watchdog.
type podRunMemory struct {
	pssKiB            int64
	procs, partitions int
}

// runMemory reads /proc for the processes of the binary the example copies
// into its app container, by pod uid.
func runMemory() map[string]*podRunMemory {
	entries, _ := os.ReadDir("/proc")
	out := map[string]*podRunMemory{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		a := argv(pid)
		if len(a) == 0 || a[0] != "/leader-elector-run/leader-elector" {
			continue
		}
		uid, _, err := node.ProcessCgroup(pid)
		if err != nil || uid == "" {
			continue
		}
		pss, ok := pssKiB(pid)
		if !ok {
			continue
		}
		m := out[uid]
		if m == nil {
			m = &podRunMemory{}
			out[uid] = m
		}
		m.pssKiB += pss
		m.procs++
		if partitionOf(a) != "" {
			m.partitions++
		}
	}
	return out
}

// pssKiB is a process's proportional set size: its private pages and its
// share of those it shares (the binary's text, with every process of it).
func pssKiB(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pss:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
