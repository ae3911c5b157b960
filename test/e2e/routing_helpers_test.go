//go:build integration

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/leader-elector/leader-elector/routing"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// podIP is the address the test gives the pod named name (the downward
// API's status.podIP, played by the test).
func podIP(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	v := h.Sum32()
	return fmt.Sprintf("10.%d.%d.%d", 100+v%100, (v>>8)%256, 1+(v>>16)%250)
}

// routedExample applies manifests/<dir> (a routing example) in namespace,
// as the admin, and returns the pod template, the ServiceAccount's
// kubeconfig and the Lease's name: the sidecars then run with exactly the
// shipped per-mode RBAC.
func routedExample(t *testing.T, dir, namespace string) (spec *corev1.PodSpec, podLabels map[string]string, kubeconfig, lease string) {
	t.Helper()
	ctx := context.Background()
	objs, err := packaging.KustomizeBuild(ctx, packaging.ManifestsDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	var d appsv1.Deployment
	var l coordinationv1.Lease
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	if err := objs.OneInto("Lease", &l); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err = controlPlane.ServiceAccountKubeconfig(ctx, namespace, d.Spec.Template.Spec.ServiceAccountName)
	if err != nil {
		t.Fatal(err)
	}
	return &d.Spec.Template.Spec, d.Spec.Template.Labels, kubeconfig, l.Name
}

// createPods creates pods from the template, as API objects (no kubelet
// runs them), with their IPs in the status as a kubelet would report.
func createPods(t *testing.T, namespace string, spec *corev1.PodSpec, labels map[string]string, names ...string) {
	t.Helper()
	ctx := context.Background()
	pods := controlPlane.AdminClient().CoreV1().Pods(namespace)
	for _, name := range names {
		p, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: *spec.DeepCopy()}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Status.PodIP = podIP(name)
		p.Status.PodIPs = []corev1.PodIP{{IP: podIP(name)}}
		if _, err := pods.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// sliceVersion is one version of the leader's EndpointSlice as the watch
// delivered it.
type sliceVersion struct {
	at        time.Time
	token     string
	holder    string
	addresses []string
}

// sliceMonitor watches the EndpointSlice of a Service and records every
// version; when the test ends it checks over the whole run that the slice
// never listed more than one address, that the address listed is always
// its writer's, and that the fencing token never went back (the shipped
// slice, empty, has none yet).
type sliceMonitor struct {
	t  *testing.T
	mu sync.Mutex
	vs []sliceVersion
	// planted holds the fencing tokens the test wrote itself, as no term
	// would: the check skips the versions that carry them.
	planted map[string]bool
}

// plant records that the test writes the slice with token, so that the
// check does not count that version as a leader's.
func (m *sliceMonitor) plant(token string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.planted == nil {
		m.planted = map[string]bool{}
	}
	m.planted[token] = true
}

func watchSlice(t *testing.T, namespace, name string) *sliceMonitor {
	m := &sliceMonitor{t: t}
	slices := controlPlane.AdminClient().DiscoveryV1().EndpointSlices(namespace)
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	watchUntilCleanup(t, slices.Watch, byName, func(ev watch.Event) {
		s, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		v := sliceVersion{at: time.Now(), token: s.Annotations[routing.FencingTokenAnnotation], holder: s.Annotations[routing.HolderAnnotation]}
		for _, e := range s.Endpoints {
			v.addresses = append(v.addresses, e.Addresses...)
		}
		if ev.Type == watch.Deleted {
			v.addresses = nil
		}
		m.mu.Lock()
		m.vs = append(m.vs, v)
		m.mu.Unlock()
	}, m.check)
	return m
}

// watchUntilCleanup watches with opts from the start, resuming after the
// last version seen when the watch ends, and hands every event of an
// object to onEvent until the test ends; then it runs done.
func watchUntilCleanup(t *testing.T, start func(context.Context, metav1.ListOptions) (watch.Interface, error), opts metav1.ListOptions, onEvent func(watch.Event), done func()) {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for ctx.Err() == nil {
			w, err := start(ctx, opts)
			if err != nil {
				time.Sleep(50 * time.Millisecond) // the API server is busy; watch again
				continue
			}
			for ev := range w.ResultChan() {
				obj, ok := ev.Object.(metav1.Object)
				if !ok || ev.Type == watch.Bookmark || ev.Type == watch.Error {
					continue
				}
				opts.ResourceVersion = obj.GetResourceVersion()
				onEvent(ev)
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-stopped
		done()
	})
}

func (m *sliceMonitor) versions() []sliceVersion {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]sliceVersion(nil), m.vs...)
}

func (m *sliceMonitor) check() {
	var lastToken int64 = -1
	m.mu.Lock()
	planted := m.planted
	m.mu.Unlock()
	for i, v := range m.versions() {
		if planted[v.token] {
			continue // the test's own write, as no term would write
		}
		if len(v.addresses) > 1 {
			m.t.Errorf("slice version %d lists %v: more than one pod", i, v.addresses)
		}
		if len(v.addresses) == 1 && v.addresses[0] != podIP(v.holder) {
			m.t.Errorf("slice version %d lists %s, but its writer %s has %s", i, v.addresses[0], v.holder, podIP(v.holder))
		}
		if v.token == "" && v.holder == "" && len(v.addresses) == 0 {
			continue // as shipped, before any leader wrote it
		}
		var token int64
		if _, err := fmt.Sscan(v.token, &token); err != nil {
			m.t.Errorf("slice version %d has fencing token %q", i, v.token)
			continue
		}
		if token < lastToken {
			m.t.Errorf("slice version %d has fencing token %d after %d: a stale write landed", i, token, lastToken)
		}
		lastToken = token
	}
}

// waitSlice waits until the slice lists exactly the pod with the fencing
// token and returns when the watch saw it.
func (m *sliceMonitor) waitSlice(c *candidate, token int64, timeout time.Duration) time.Time {
	m.t.Helper()
	want := fmt.Sprint(token)
	var at time.Time
	// Polling the versions the watch recorded.
	if wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		vs := m.versions()
		if n := len(vs); n > 0 {
			v := vs[n-1]
			if v.token == want && v.holder == c.name && len(v.addresses) == 1 && v.addresses[0] == podIP(c.name) {
				at = v.at
				return true, nil
			}
		}
		return false, nil
	}) == nil {
		return at
	}
	vs := m.versions()
	m.t.Fatalf("the slice does not list %s (%s) with token %d within %v; last versions: %+v", c.name, podIP(c.name), token, timeout, vs[max(0, len(vs)-3):])
	return time.Time{}
}

// labelMonitor watches the pods of a namespace and checks, after every
// event, that at most one carries the leader label "true".
type labelMonitor struct {
	t  *testing.T
	mu sync.Mutex
	// leaders is the pods labelled "true" after each event, with when.
	history []labelState
}

type labelState struct {
	at      time.Time
	leaders []string
}

func watchLabels(t *testing.T, namespace string) *labelMonitor {
	m := &labelMonitor{t: t}
	labelled := map[string]bool{}
	watchUntilCleanup(t, controlPlane.AdminClient().CoreV1().Pods(namespace).Watch, metav1.ListOptions{}, func(ev watch.Event) {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok {
			return
		}
		labelled[p.Name] = ev.Type != watch.Deleted && p.Labels[routing.DefaultLeaderLabel] == "true"
		var leaders []string
		for name, yes := range labelled {
			if yes {
				leaders = append(leaders, name)
			}
		}
		m.mu.Lock()
		m.history = append(m.history, labelState{at: time.Now(), leaders: leaders})
		m.mu.Unlock()
	}, func() {
		for _, s := range m.states() {
			if len(s.leaders) > 1 {
				t.Errorf("at %s pods %v all carried %s=true", stamp(s.at), s.leaders, routing.DefaultLeaderLabel)
			}
		}
	})
	return m
}

func (m *labelMonitor) states() []labelState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]labelState(nil), m.history...)
}

// waitLabelled waits until exactly c's pod is labelled "true" and returns
// when the watch saw it.
func (m *labelMonitor) waitLabelled(c *candidate, timeout time.Duration) time.Time {
	m.t.Helper()
	var at time.Time
	// Polling the states the watch recorded.
	if wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		if hs := m.states(); len(hs) > 0 {
			last := hs[len(hs)-1]
			if len(last.leaders) == 1 && last.leaders[0] == c.name {
				at = last.at
				return true, nil
			}
		}
		return false, nil
	}) == nil {
		return at
	}
	hs := m.states()
	m.t.Fatalf("not exactly %s labelled leader within %v; last states: %+v", c.name, timeout, hs[max(0, len(hs)-3):])
	return time.Time{}
}

// holdingProxy stands between one sidecar and the API server, as a network
// that can delay a request: while holding, it keeps the sidecar's routing
// writes (those heldWrite selects) instead of sending them (the sidecar
// times out), and sends them late when released — a stale leader's write
// landing after a new leader's.
type holdingProxy struct {
	t       *testing.T
	server  *httptest.Server
	target  *url.URL
	client  *http.Client
	mu      sync.Mutex
	holding bool
	held    []heldRequest
	// heldWrite selects the requests to hold.
	heldWrite func(*http.Request) bool
}

type heldRequest struct {
	method, url string
	header      http.Header
	body        []byte
}

// startHoldingProxy proxies for the API server of kubeconfig (a
// ServiceAccount token, which it passes through) and returns the proxy and
// a kubeconfig that goes through it.
func startHoldingProxy(t *testing.T, kubeconfig string, heldWrite func(*http.Request) bool) (*holdingProxy, string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	current := cfg.Contexts[cfg.CurrentContext]
	cluster := cfg.Clusters[current.Cluster]
	// clientcmd sends no credentials to a plain-HTTP server: the proxy
	// adds the token itself.
	token := cfg.AuthInfos[current.AuthInfo].Token
	target, err := url.Parse(cluster.Server)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cluster.CertificateAuthorityData)
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	p := &holdingProxy{t: t, target: target, client: &http.Client{Transport: transport, Timeout: 10 * time.Second}, heldWrite: heldWrite}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = transport
	rp.FlushInterval = -1 // watches stream
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+token)
		if p.hold(r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.server.Close)

	cluster.Server = p.server.URL
	cluster.CertificateAuthorityData = nil
	path := filepath.Join(t.TempDir(), "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return p, path
}

// sliceWrites selects EndpointSlice writes.
func sliceWrites(r *http.Request) bool {
	return (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, "/endpointslices")
}

// podPatches selects patches of the pod named name.
func podPatches(name string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		return r.Method == http.MethodPatch && strings.HasSuffix(r.URL.Path, "/pods/"+name)
	}
}

// hold keeps r if it is a write heldWrite selects and the proxy is
// holding; the client gets no answer.
func (p *holdingProxy) hold(r *http.Request) bool {
	if !p.heldWrite(r) {
		return false
	}
	p.mu.Lock()
	if !p.holding {
		p.mu.Unlock()
		return false
	}
	body, _ := io.ReadAll(r.Body)
	u := *p.target
	u.Path, u.RawQuery = r.URL.Path, r.URL.RawQuery
	p.held = append(p.held, heldRequest{method: r.Method, url: u.String(), header: r.Header.Clone(), body: body})
	p.mu.Unlock()
	<-r.Context().Done()
	return true
}

func (p *holdingProxy) setHolding(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = on
}

func (p *holdingProxy) heldCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// release stops holding and sends every held write now, returning the API
// server's status codes.
func (p *holdingProxy) release() []int {
	p.mu.Lock()
	p.holding = false
	held := p.held
	p.held = nil
	p.mu.Unlock()
	var codes []int
	for _, h := range held {
		req, err := http.NewRequest(h.method, h.url, bytes.NewReader(h.body))
		if err != nil {
			p.t.Fatal(err)
		}
		req.Header = h.header
		resp, err := p.client.Do(req)
		if err != nil {
			p.t.Fatalf("sending a held write late: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The body may be protobuf: quoted, it cannot put control bytes in the log.
		p.t.Logf("late %s %s: %s %q", h.method, h.url, resp.Status, bytes.TrimSpace(body))
		codes = append(codes, resp.StatusCode)
	}
	return codes
}
