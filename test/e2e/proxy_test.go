//go:build integration

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/test/harness"
)

// proxyDrain is the candidates' --proxy-drain: longer than the echo app
// takes to answer a request it has accepted (it asks its sidecar's
// /leader once, on loopback), so that a graceful handover lets every
// request in flight end within the term, and fails none.
const proxyDrain = 250 * time.Millisecond

// proxyAnswer is what the echo app behind each proxy answers: its pod,
// the term it accepted the connection in, and whether its sidecar said it
// led that term then.
type proxyAnswer struct {
	pod      string
	token    int64
	isLeader bool
	via      string
}

// proxyEchoApp serves each line with its pod's name, the fencing token
// and isLeader its sidecar reported when the connection came in.
type proxyEchoApp struct {
	addr    string
	sidecar atomic.Pointer[candidate]
}

func startProxyEchoApp(t *testing.T) *proxyEchoApp {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	a := &proxyEchoApp{addr: l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go a.serve(conn)
		}
	}()
	return a
}

func (a *proxyEchoApp) serve(conn net.Conn) {
	defer conn.Close()
	accepted := time.Now()
	c := a.sidecar.Load()
	if c == nil {
		return
	}
	s, err := c.state()
	if err != nil {
		return
	}
	// The term the connection came in: the current one, or, if the
	// sidecar's answer came after its term ended, the one it lost, if the
	// connection came before that end. A drain runs within the term, so
	// there is no overlap to allow for.
	token, led := s.FencingToken, s.IsLeader
	if lost := s.LastChange; !led && lost != nil && !lost.IsLeader {
		token, led = lost.FencingToken, accepted.Before(lost.At.Time)
	}
	r := bufio.NewReader(conn)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		if _, err := fmt.Fprintf(conn, "%s %d %t\n", c.name, token, led); err != nil {
			return
		}
	}
}

// createProxyPods creates the candidates' pods as API objects (no kubelet
// runs them), running as one ServiceAccount, with the loopback IPs the
// candidates listen on in their status as a kubelet would report them.
func createProxyPods(t *testing.T, sa string, ipOf map[string]string) {
	t.Helper()
	ctx := context.Background()
	admin := controlPlane.AdminClient().CoreV1()
	if _, err := admin.ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, ip := range ipOf {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{
				ServiceAccountName:           sa,
				AutomountServiceAccountToken: ptr.To(false),
				Containers:                   []corev1.Container{{Name: "app", Image: "registry.example/app:1"}},
			},
		}
		p, err := admin.Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		if _, err := admin.Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for name := range ipOf {
			_ = admin.Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
		_ = admin.ServiceAccounts("default").Delete(context.Background(), sa, metav1.DeleteOptions{})
	})
}

// TestProxyForwardsToTheLeaderAcrossHandovers: three candidates, each with
// the proxy on its own loopback IP (its pod's IP) in front of an echo app.
// Clients connect to any candidate's proxy, a new connection for each
// request, while the leader hands over gracefully (POST /release) five
// times. Every answer comes from a pod that led, by its own sidecar's
// time-bounded view, when its app accepted the connection, in a term the
// Lease named; no request fails.
func TestProxyForwardsToTheLeaderAcrossHandovers(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	versions := watchLeaseVersions(t, controlPlane.AdminClient(), lease)
	g, names, proxyAddr := startProxyGroup(t, lease)
	leader := g.WaitLeader(30 * time.Second)

	// Clients: a new connection per request, to a candidate in turn.
	var (
		mu       sync.Mutex
		answers  []proxyAnswer
		failures []string
		stop     atomic.Bool
		clients  sync.WaitGroup
	)
	// A request may wait for the next leader: a release and a takeover
	// take a retry period or two, bounded by --proxy-wait (the renew
	// deadline); the slack covers the rest.
	const requestSlack = 2 * time.Second
	for k := range 3 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for i := k; !stop.Load(); i++ {
				via := names[i%len(names)]
				a, err := proxyRequest(proxyAddr[via], renewDeadline+requestSlack)
				mu.Lock()
				if err != nil {
					failures = append(failures, fmt.Sprintf("%s at %s: %v", via, time.Now().Format(time.StampMilli), err))
				} else {
					a.via = via
					answers = append(answers, a)
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}

	// A released pod sits out a lease duration; with three candidates a
	// handover every half lease duration leaves one free to take over.
	const handovers, handoverEvery = 5, leaseDuration / 2
	for range handovers {
		time.Sleep(handoverEvery)
		if code, _, body, err := leader.do("POST", "/release", nil); err != nil || code != 200 {
			t.Fatalf("POST /release on %s = %d %s %v", leader.name, code, body, err)
		}
		leader = g.WaitLeader(leaseDuration, leader)
	}
	time.Sleep(time.Second)
	stop.Store(true)
	clients.Wait()

	terms := map[string]bool{}
	for _, l := range versions() {
		terms[fmt.Sprintf("%s/%d", ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, -1))] = true
	}
	mu.Lock()
	defer mu.Unlock()
	viaCount, tokens := map[string]int{}, map[int64]bool{}
	for _, a := range answers {
		viaCount[a.via]++
		tokens[a.token] = true
		if !a.isLeader || !terms[fmt.Sprintf("%s/%d", a.pod, a.token)] {
			t.Errorf("through %s: answered by %s, token %d, isLeader %t: not the leader of a term the Lease named", a.via, a.pod, a.token, a.isLeader)
		}
	}
	t.Logf("%d answers through %v, from %d terms; %d failed", len(answers), viaCount, len(tokens), len(failures))
	if len(failures) > 0 {
		t.Errorf("%d requests failed across %d graceful handovers, want 0: %v", len(failures), handovers, failures)
	}
	if len(tokens) < handovers+1 {
		t.Errorf("answers from %d terms, want %d (every term of the run)", len(tokens), handovers+1)
	}
	for _, name := range names {
		if viaCount[name] == 0 {
			t.Errorf("no answer through %s's proxy", name)
		}
	}
}

// startProxyGroup starts three candidates on lease, each with its pod (an
// API object with the candidate's loopback IP as its pod IP), its echo
// app, and its proxy on its IP; it returns them and their proxies'
// addresses.
func startProxyGroup(t *testing.T, lease string) (g *group, names []string, proxyAddr map[string]string) {
	t.Helper()
	ports, err := harness.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	ipOf := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("%s-%d", lease, i)
		names = append(names, name)
		ipOf[name] = fmt.Sprintf("127.0.0.%d", i+2)
	}
	createProxyPods(t, lease, ipOf)
	g = groupOf(t, lease)
	proxyAddr = map[string]string{}
	for _, name := range names {
		app := startProxyEchoApp(t)
		proxyAddr[name] = net.JoinHostPort(ipOf[name], strconv.Itoa(ports[0]))
		c := startCandidate(t, name, candidateOptions{lease: lease, extraArgs: []string{
			"--proxy-address=" + proxyAddr[name],
			"--proxy-peer-address=" + net.JoinHostPort(ipOf[name], strconv.Itoa(ports[1])),
			"--proxy-upstream=" + app.addr,
			"--proxy-drain=" + proxyDrain.String(),
		}})
		app.sidecar.Store(c)
		g.Add(c)
	}
	return g, names, proxyAddr
}

// TestProxyCrashFailover: the leader is killed (SIGKILL) while clients ask
// through the two other candidates' proxies, a new connection for each
// request. Only requests between the crash and the takeover fail: those
// in flight to the killed leader, and those that waited --proxy-wait (the
// renew deadline) without a leader; none that ended before the kill or
// began after the takeover was seen. Every answer comes from a leader.
func TestProxyCrashFailover(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	g, names, proxyAddr := startProxyGroup(t, lease)
	leader := g.WaitLeader(30 * time.Second)
	var via []string
	for _, name := range names {
		if name != leader.name {
			via = append(via, name)
		}
	}
	type result struct {
		start, end time.Time
		answer     proxyAnswer
		err        error
	}
	var (
		mu      sync.Mutex
		results []result
		stop    atomic.Bool
		clients sync.WaitGroup
	)
	const requestSlack = 2 * time.Second
	for k := range 2 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for i := k; !stop.Load(); i++ {
				start := time.Now()
				a, err := proxyRequest(proxyAddr[via[i%len(via)]], renewDeadline+requestSlack)
				mu.Lock()
				results = append(results, result{start: start, end: time.Now(), answer: a, err: err})
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	time.Sleep(time.Second)
	killed := time.Now()
	leader.signal(syscall.SIGKILL)
	next := g.WaitLeader(leaseDuration+5*time.Second, leader)
	tookOver := time.Now()
	time.Sleep(time.Second)
	stop.Store(true)
	clients.Wait()

	mu.Lock()
	defer mu.Unlock()
	failed, answered := 0, 0
	for _, r := range results {
		if r.err == nil {
			answered++
			if !r.answer.isLeader {
				t.Errorf("a request at %s was answered by %s (token %d), which did not lead then", stamp(r.start), r.answer.pod, r.answer.token)
			}
			continue
		}
		failed++
		if r.end.Before(killed) || !r.start.Before(tookOver) {
			t.Errorf("a request from %s to %s failed (the kill at %s, the takeover seen at %s): %v", stamp(r.start), stamp(r.end), stamp(killed), stamp(tookOver), r.err)
		}
	}
	t.Logf("%d answered, %d failed; leader %s killed at %s, %s took over %s later", answered, failed, leader.name, stamp(killed), next.name, tookOver.Sub(killed).Round(time.Millisecond))
	if answered == 0 {
		t.Fatal("no request was answered")
	}
}

// proxyRequest opens a connection to a proxy, sends one line and reads
// the answer, within timeout.
func proxyRequest(addr string, timeout time.Duration) (proxyAnswer, error) {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return proxyAnswer{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(conn, "who leads?"); err != nil {
		return proxyAnswer{}, err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return proxyAnswer{}, err
	}
	var a proxyAnswer
	if _, err := fmt.Sscanf(strings.TrimSpace(line), "%s %d %t", &a.pod, &a.token, &a.isLeader); err != nil {
		return proxyAnswer{}, fmt.Errorf("answer %q: %w", line, err)
	}
	return a, nil
}
