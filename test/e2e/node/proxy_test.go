//go:build integration

package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// Proxy proof timings. The chart's defaults, but for a shorter lease, so
// that the crash failover at the end costs seconds, not 15: the proxy's
// --proxy-wait is the renew deadline.
const (
	proxyLeaseSeconds = 6
	proxyRenewSeconds = 4
	proxyRetrySeconds = 1
	// proxyClientTimeout bounds one request: the proxy may hold a new
	// connection up to --proxy-wait (the renew deadline) while no leader
	// is known, and the answer takes a moment more.
	proxyClientTimeout = proxyRenewSeconds*time.Second + nodeSlack
)

// TestProxyNoFailedRequest: the chart's demo with the forwarding proxy on
// (proxy.enabled, so every candidate is Ready and a Service endpoint, and
// the default RollingUpdate strategy), 3 replicas. Clients ask the
// Service's ClusterIP at over 100 requests per second, some with a new
// connection each time and some reusing theirs, through 20 graceful
// handovers (POST /release on the leader, as an app would) and 5 rolling
// updates: no request fails, and every answer comes from a pod that held
// the Lease around the time of the request. Then a crash failover (the
// leader's sidecar SIGKILLed): failures are allowed only between the kill
// and the takeover, and counted. The same clients through leader-only
// readiness and no proxy, over 5 graceful handovers, give the
// figures to compare with.
//
// The app is test/node/echoapp (useEchoApp): it keeps connections alive
// and names its term in every answer.
//
// It runs in the node suite (so in CI), and alone with `make proxy-proof`.
// On a failure it prints every pod's log and the Service's endpoints
// around it; docs/routing.md keeps its record of runs and the two failures
// it has had.
func TestProxyNoFailedRequest(t *testing.T) {
	timings := []string{
		fmt.Sprintf("election.leaseDurationSeconds=%d", proxyLeaseSeconds),
		fmt.Sprintf("election.renewDeadlineSeconds=%d", proxyRenewSeconds),
		fmt.Sprintf("election.retryPeriodSeconds=%d", proxyRetrySeconds),
		"demo.replicas=3",
	}
	t.Run("proxy", func(t *testing.T) {
		d, _ := helmInstallWait(t, "proxy-proof", append(timings, "proxy.enabled=true", "proxy.upstreamPort=8081")...)
		d.useEchoApp(t)
		logs := d.followLogs(t)
		o := d.observe(t)
		load := startServiceLoad(t, d)
		d.waitHolder(t, "")
		handovers := d.handOverTimes(t, 20, load.mark)
		rollouts := d.rollOutTimes(t, 5, load.mark)
		// The last old pods still terminate (the proxy's shutdown delay):
		// their clients and their releases belong to the proof.
		d.waitPods(t, 200*time.Millisecond, func(_ *appsv1.Deployment, pods []corev1.Pod) (bool, string) {
			terminating := 0
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					terminating++
				}
			}
			return terminating == 0, fmt.Sprintf("%d pods terminating", terminating)
		})
		stats := load.stop()
		obs := o.end(t)
		stats.check(t, obs, nil)
		if from, to, ok := stats.failedSpan(nil); ok {
			from, to = from.Add(-2*time.Second), to.Add(time.Second)
			obs.logEndpoints(t, from, to)
			logs.between(t, from, to, 80)
		}
		t.Logf("MEASURED proxy: %s over %d graceful handovers (%s) and %d rolling updates (%s)", stats, len(handovers), summary(handovers), len(rollouts), summary(rollouts))
		t.Logf("MEASURED proxy: leadership moves per rolling update (default strategy, no health gating): %v", stats.movesPerRollout(obs))

		// A crash: only requests between the kill and the takeover may fail.
		o = d.observe(t)
		load = startServiceLoad(t, d)
		time.Sleep(time.Second)
		leader := d.waitHolder(t, "")
		pod := d.getPod(t, leader)
		killed := time.Now()
		if _, err := theNode.KillContainer(context.Background(), containerIDOf(pod, packaging.SidecarName)); err != nil {
			t.Fatal(err)
		}
		next := d.waitHolder(t, leader)
		tookOver := time.Now()
		time.Sleep(2 * time.Second)
		stats = load.stop()
		obs = o.end(t)
		stats.check(t, obs, &[2]time.Time{killed, tookOver})
		t.Logf("MEASURED proxy, crash failover (%s killed, %s took over %v later): %s", leader, next, since2(killed, tookOver), stats)
	})

	t.Run("leader readiness, no proxy", func(t *testing.T) {
		d, _ := helmInstallWait(t, "proxy-proof-none", append(timings, "election.readiness=leader")...)
		d.useEchoApp(t)
		d.waitSettled(t, d.settleTimeout())
		o := d.observe(t)
		load := startServiceLoad(t, d)
		handovers := d.handOverTimes(t, 5, load.mark)
		stats := load.stop()
		obs := o.end(t)
		// Without the proxy a deposed leader keeps the connections it had:
		// its answers after its term are counted, the comparison's point.
		t.Logf("MEASURED leader readiness, no proxy: %s over %d graceful handovers (%s); %d answered by a pod outside its term", stats, len(handovers), summary(handovers), len(stats.wrongAnswers(obs)))
		if len(stats.results) == 0 {
			t.Error("no request was made")
		}
	})
}

// useEchoApp replaces the demo's app (busybox's httpd, which closes every
// connection after its answer) with test/node/echoapp, which keeps
// connections alive and answers with its pod, its term's fencing token
// and isLeader, and waits until every pod runs it (not for `kubectl
// rollout status`, which never ends with leader-only readiness).
func (d *deployment) useEchoApp(t *testing.T) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"app","image":%q,"imagePullPolicy":"Never","command":["/echoapp"],"args":null}]}}}}`, echoAppImage)
	if _, err := d.client.AppsV1().Deployments(d.namespace).Patch(context.Background(), d.deployment, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d.waitPods(t, 200*time.Millisecond, func(dep *appsv1.Deployment, pods []corev1.Pod) (bool, string) {
		running := 0
		for _, p := range pods {
			for _, c := range p.Spec.Containers {
				if c.Name == "app" && c.Image == echoAppImage && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running++
				}
			}
		}
		return running == len(pods) && int32(running) == *dep.Spec.Replicas, fmt.Sprintf("%d of %d pods run the echo app", running, len(pods))
	})
}

// waitHolder waits until a pod other than except holds the Lease, and
// returns it.
func (d *deployment) waitHolder(t *testing.T, except string) string {
	t.Helper()
	var holder string
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, nodeGiveUp, true, func(ctx context.Context) (bool, error) {
		h, err := d.holder(ctx)
		holder = h
		return err == nil && h != "" && h != except, nil
	}); err != nil {
		t.Fatalf("no pod other than %q holds the Lease after %v (holder %q)", except, nodeGiveUp, holder)
	}
	return holder
}

// handOverTimes makes the leader release n times (POST /release on its
// sidecar, from inside its pod's network namespace, as its app would), a
// second apart, and returns the times from each release to the next
// holder's write seen.
func (d *deployment) handOverTimes(t *testing.T, n int, mark func(string)) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range n {
		time.Sleep(time.Second)
		leader := d.waitHolder(t, "")
		sent := time.Now()
		mark(fmt.Sprintf("handover %d: POST /release to %s", i+1, leader))
		d.postRelease(t, leader)
		d.waitHolder(t, leader)
		took = append(took, time.Since(sent))
	}
	return took
}

// postRelease sends POST /release to pod's sidecar on its localhost.
func (d *deployment) postRelease(t *testing.T, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pid, err := theNode.ContainerPID(ctx, containerIDOf(d.getPod(t, pod), packaging.SidecarName))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:4040/release", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := netnsClient(ns, 5*time.Second, false).Do(req)
	if err != nil {
		t.Fatalf("POST /release to %s: %v", pod, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"released":true`) {
		t.Fatalf("POST /release to %s: %s %s", pod, resp.Status, body)
	}
}

// rollOutTimes makes n rolling updates (kubectl rollout restart, the
// Deployment's own strategy), each waited for with kubectl rollout status,
// and returns how long each took.
func (d *deployment) rollOutTimes(t *testing.T, n int, mark func(string)) []time.Duration {
	t.Helper()
	var took []time.Duration
	for i := range n {
		mark(fmt.Sprintf("rolling update %d", i+1))
		began := d.rolloutRestart(t)
		if out, err := d.rolloutStatus(t, 3*time.Minute); err != nil || !strings.Contains(out, "successfully rolled out") {
			t.Fatalf("rolling update %d: kubectl rollout status: %v\n%s", i+1, err, out)
		}
		took = append(took, time.Since(began))
	}
	return took
}

// serviceLoad asks the Service's ClusterIP from the test's network
// namespace: newConnClients goroutines with a new connection for each
// request and keepAliveClients reusing theirs, each one request every
// loadInterval.
type serviceLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	began  time.Time

	mu      sync.Mutex
	results []loadResult
	events  []loadEvent
}

// loadEvent is what the test did at a moment, to place failures.
type loadEvent struct {
	at   time.Time
	what string
}

// mark records what the test does now.
func (l *serviceLoad) mark(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, loadEvent{time.Now(), what})
}

const (
	newConnClients   = 6
	keepAliveClients = 2
	loadInterval     = 25 * time.Millisecond
)

type loadResult struct {
	start, end time.Time
	pod        string
	token      int64 // the answering app's term, -1 if it did not say
	isLeader   bool  // its sidecar's isLeader when it answered
	err        error
	keepAlive  bool
	reused     bool // the request went on a connection used before
}

func startServiceLoad(t *testing.T, d *deployment) *serviceLoad {
	t.Helper()
	url, err := d.serviceURL(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &serviceLoad{cancel: cancel, began: time.Now()}
	for i := range newConnClients + keepAliveClients {
		keepAlive := i >= newConnClients
		client := &http.Client{Timeout: proxyClientTimeout, Transport: &http.Transport{DisableKeepAlives: !keepAlive}}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(loadInterval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				l.record(l.ask(ctx, client, url, keepAlive))
			}
		}()
	}
	return l
}

func (l *serviceLoad) ask(ctx context.Context, client *http.Client, url string, keepAlive bool) loadResult {
	r := loadResult{start: time.Now(), keepAlive: keepAlive}
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { r.reused = info.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(context.WithoutCancel(ctx), trace), http.MethodGet, url, nil)
	if err != nil {
		r.err = err
		return r
	}
	resp, err := client.Do(req)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		_ = resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", resp.Status, b)
		}
		r.pod, r.token, r.isLeader = parseAnswer(string(b))
	}
	r.err, r.end = err, time.Now()
	return r
}

// parseAnswer reads the echo app's "pod token isLeader"; busybox's httpd
// answers the pod alone.
func parseAnswer(b string) (pod string, token int64, isLeader bool) {
	f := strings.Fields(b)
	token = -1
	if len(f) == 3 {
		if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
			token, isLeader = n, f[2] == "true"
		}
	}
	if len(f) > 0 {
		pod = f[0]
	}
	return pod, token, isLeader
}

func (l *serviceLoad) record(r loadResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.results = append(l.results, r)
}

// stop ends the load once the requests in flight have ended.
func (l *serviceLoad) stop() loadStats {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := loadStats{results: slices.Clone(l.results), events: slices.Clone(l.events), began: l.began, took: time.Since(l.began)}
	return s
}

type loadStats struct {
	results []loadResult
	events  []loadEvent
	began   time.Time
	took    time.Duration
}

// movesPerRollout counts, for each rolling update, how many times the
// Lease changed to another holder from its start to the next one's (the
// last: to the load's end): an old leader's release may come after
// `rollout status` has returned, while its pod terminates.
func (s loadStats) movesPerRollout(obs observation) []int {
	var starts []time.Time
	for _, e := range s.events {
		if strings.HasPrefix(e.what, "rolling update") {
			starts = append(starts, e.at)
		}
	}
	moves := make([]int, len(starts))
	for i, from := range starts {
		to := s.began.Add(s.took)
		if i+1 < len(starts) {
			to = starts[i+1]
		}
		last := ""
		for _, l := range obs.leases {
			if l.holder == "" || !l.at.Before(to) {
				continue
			}
			if !l.at.Before(from) && last != "" && l.holder != last {
				moves[i]++
			}
			last = l.holder
		}
	}
	return moves
}

// after names the last event before at, and how long before.
func (s loadStats) after(at time.Time) string {
	last := "the start"
	from := at
	for _, e := range s.events {
		if e.at.After(at) {
			break
		}
		last, from = e.what, e.at
	}
	return fmt.Sprintf("%v after %s", at.Sub(from).Round(time.Millisecond), last)
}

// errorKind sorts a failed request's error into a few kinds, to count.
func errorKind(err error) string {
	msg := err.Error()
	for _, k := range []string{"connection reset", "connection refused", "EOF", "Client.Timeout", "deadline exceeded", "broken pipe"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return "other"
}

func (s loadStats) String() string {
	var failed, reused, keepAlive int
	for _, r := range s.results {
		if r.err != nil {
			failed++
		}
		if r.keepAlive {
			keepAlive++
			if r.reused {
				reused++
			}
		}
	}
	var took []time.Duration
	for _, r := range s.results {
		if r.err == nil {
			took = append(took, r.end.Sub(r.start))
		}
	}
	return fmt.Sprintf("%d requests (%.0f/s; %d on keep-alive clients, %d of them on a reused connection), %d failed; answered in %s",
		len(s.results), float64(len(s.results))/s.took.Seconds(), keepAlive, reused, failed, summary(took))
}

// failedSpan is from the start of the first failed request to the end of
// the last, leaving out those that overlapped window (as check does).
func (s loadStats) failedSpan(window *[2]time.Time) (from, to time.Time, ok bool) {
	for _, r := range s.results {
		if r.err == nil || window != nil && r.end.After(window[0]) && r.start.Before(window[1]) {
			continue
		}
		if !ok || r.start.Before(from) {
			from = r.start
		}
		if !ok || r.end.After(to) {
			to = r.end
		}
		ok = true
	}
	return from, to, ok
}

// check fails the test for a failed request, unless it overlapped window
// (the crash's kill and takeover), and checks the answers (checkAnswers).
func (s loadStats) check(t *testing.T, obs observation, window *[2]time.Time) {
	t.Helper()
	for _, l := range obs.leases {
		s.events = append(s.events, loadEvent{l.at, "the Lease named " + orNone(l.holder)})
	}
	slices.SortStableFunc(s.events, func(a, b loadEvent) int { return a.at.Compare(b.at) })
	shown := 0
	kinds := map[string]int{}
	for _, r := range s.results {
		if r.err == nil {
			continue
		}
		if window != nil && r.end.After(window[0]) && r.start.Before(window[1]) {
			continue
		}
		kinds[errorKind(r.err)]++
		if shown++; shown <= 20 {
			t.Errorf("a request (keep-alive %v, reused %v) from %s (%s) to %s failed: %v", r.keepAlive, r.reused, stamp(r.start), s.after(r.start), stamp(r.end), r.err)
		}
	}
	if shown > 20 {
		t.Errorf("… and %d more failed requests", shown-20)
	}
	if shown > 0 {
		t.Errorf("failed requests by kind: %v", kinds)
	}
	s.checkAnswers(t, obs)
}

// checkAnswers: every answer comes from a pod that held the Lease, as the
// observer's watch saw it, in the term the answer names, at some moment
// from a slack before the request to a slack after it (the watch delivers
// a moment late), and whose sidecar still said it led.
func (s loadStats) checkAnswers(t *testing.T, obs observation) {
	t.Helper()
	for i, e := range s.wrongAnswers(obs) {
		if i < 5 {
			t.Error(e)
		}
	}
	if len(s.results) == 0 {
		t.Error("no request was made")
	}
}

// wrongAnswers describes each answer from a pod outside its term (see
// checkAnswers).
func (s loadStats) wrongAnswers(obs observation) []string {
	const slack = 2 * nodeSlack
	var wrong []string
	for _, r := range s.results {
		if r.err != nil {
			continue
		}
		if !obs.heldBetween(r.pod, r.token, r.start.Add(-slack), r.end.Add(slack)) {
			wrong = append(wrong, fmt.Sprintf("a request from %s to %s was answered by %q in term %d, which it did not hold then", stamp(r.start), stamp(r.end), r.pod, r.token))
		} else if r.token >= 0 && !r.isLeader {
			wrong = append(wrong, fmt.Sprintf("a request from %s to %s was answered by %q after its term %d had ended (its sidecar said isLeader false)", stamp(r.start), stamp(r.end), r.pod, r.token))
		}
	}
	return wrong
}

// heldBetween reports whether pod held the Lease, in the term token (-1:
// any), at some moment in [from, to], by the observed Lease versions.
func (r observation) heldBetween(pod string, token int64, from, to time.Time) bool {
	for i, l := range r.leases {
		if l.holder != pod || l.at.After(to) || (token >= 0 && int64(l.transitions) != token) {
			continue
		}
		// l holds from l.at until the next version.
		if i+1 == len(r.leases) || !r.leases[i+1].at.Before(from) {
			return true
		}
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "no one"
	}
	return s
}

func stamp(t time.Time) string { return t.Format("15:04:05.000") }
