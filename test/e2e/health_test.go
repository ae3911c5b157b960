//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// Health gating's timings in these tests: a probe every 500 ms, three
// failures make an app unhealthy, one success healthy again.
const (
	healthPeriod   = 500 * time.Millisecond
	healthFailures = 3
)

// appHealth is one candidate's app health endpoint, served on loopback by
// the test, which flips it.
type appHealth struct {
	srv     *httptest.Server
	healthy atomic.Bool
}

func newAppHealth(t *testing.T, healthy bool) *appHealth {
	a := &appHealth{}
	a.healthy.Store(healthy)
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if a.healthy.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *appHealth) args() []string {
	return []string{"--app-health-url=" + a.srv.URL + "/healthz", "--app-health-period=" + healthPeriod.String(), fmt.Sprintf("--app-health-failures=%d", healthFailures), "--app-health-successes=1"}
}

// createCandidatesLease creates the election's candidates Lease, as the
// manifests and the chart ship it (the sidecar may not create it).
func createCandidatesLease(t *testing.T, s leaseStore, lease string) {
	t.Helper()
	_, err := s.client.CoordinationV1().Leases("default").Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: lease + "-candidates"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// candidateEntries reads the candidates Lease's entries.
func candidateEntries(t *testing.T, s leaseStore, lease string) map[string]struct {
	Healthy bool  `json:"healthy"`
	Seq     int64 `json:"seq"`
} {
	t.Helper()
	l, err := s.client.CoordinationV1().Leases("default").Get(context.Background(), lease+"-candidates", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]struct {
		Healthy bool  `json:"healthy"`
		Seq     int64 `json:"seq"`
	}{}
	if raw := l.Annotations["leader-elector.io/candidates"]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			t.Fatalf("candidates annotation %q: %v", raw, err)
		}
	}
	return out
}

// healthGroup starts n candidates with health gating, each app's health
// served by the test; healthy says how each app starts.
func healthGroup(t *testing.T, s leaseStore, healthy ...bool) (*group, []*appHealth) {
	lease := leaseName(t)
	createCandidatesLease(t, s, lease)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	apps := make([]*appHealth, len(healthy))
	for i, h := range healthy {
		apps[i] = newAppHealth(t, h)
		g.Add(startCandidate(t, fmt.Sprintf("%s-%d", lease, i), s.on(candidateOptions{lease: lease, extraArgs: apps[i].args()})))
	}
	return g, apps
}

// waitEntries waits until every candidate has an entry that says healthy
// as wanted and has been written at least minSeq times.
func waitEntries(t *testing.T, s leaseStore, g *group, minSeq int64, healthy func(name string) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 4*leaseDuration, true, func(context.Context) (bool, error) {
		entries := candidateEntries(t, s, g.lease)
		for _, c := range g.Members() {
			e, ok := entries[c.name]
			if !ok || e.Healthy != healthy(c.name) || e.Seq < minSeq {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("candidates' entries not as wanted: %v", candidateEntries(t, s, g.lease))
	}
}

// TestHealthStepDown: the leader's app turns unhealthy while the other
// candidates' apps are healthy → the leader steps down (reason
// app-unhealthy, /readyz fails) and a healthy candidate leads within
// failures × period (+ the probe timeout, half a period) + one handover.
// On both lease stores.
func TestHealthStepDown(t *testing.T) {
	t.Parallel()
	onEachStore(t, testHealthStepDown)
}

func testHealthStepDown(t *testing.T, store leaseStore) {
	g, apps := healthGroup(t, store, true, true, true)
	leader := g.WaitLeader(giveUp)
	// Entries start unhealthy (seq 1) and are written again when they turn
	// healthy; each candidate counts the others' from its first read.
	waitEntries(t, store, g, 1, func(string) bool { return true })
	var app *appHealth
	for i, c := range g.Members() {
		if c == leader {
			app = apps[i]
		}
	}
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}

	flipped := time.Now()
	app.healthy.Store(false)
	handover := handoverBound
	bound := time.Duration(healthFailures)*healthPeriod + healthPeriod/2 + handover
	next := g.WaitLeader(giveUp, leader)
	took := time.Since(flipped)
	t.Logf("MEASURED health step-down (leader's app unhealthy → %s leads): %v (bound %v = %d × %v + %v probe timeout + %v handover)", next.name, took.Round(time.Millisecond), bound, healthFailures, healthPeriod, healthPeriod/2, handover)
	if took > bound {
		t.Errorf("leadership moved after %v, more than the bound %v", took, bound)
	}
	s, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	if s.IsLeader || s.LastChange == nil || s.LastChange.Reason != "app-unhealthy" || s.LastChange.IsLeader {
		t.Errorf("old leader %s: isLeader %v, lastChange %+v; want not leading, reason app-unhealthy", leader.name, s.IsLeader, s.LastChange)
	}
	if s.Degraded {
		t.Errorf("old leader %s reports degraded (%s) after stepping down", leader.name, s.DegradedReason)
	}
	waitChangeLogged(t, leader, "Stopped leading", "app-unhealthy")
	after, err := next.state()
	if err != nil {
		t.Fatal(err)
	}
	if after.FencingToken <= before.FencingToken {
		t.Errorf("fencing token %d after the step-down, was %d", after.FencingToken, before.FencingToken)
	}
	code, body, err := leader.probe("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "the app is unhealthy") {
		t.Errorf("old leader's /readyz = %d %q, %v; want 503 saying the app is unhealthy", code, body, err)
	}
	// Unhealthy, it does not take the Lease back, even when it is free.
	waitEntries(t, store, g, 0, func(name string) bool { return name != leader.name })
	if err := holdsFor(2*leaseDuration, 100*time.Millisecond, func() error {
		if s, err := leader.state(); err == nil && s.IsLeader {
			return fmt.Errorf("%s leads again while its app is unhealthy", leader.name)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	// Healthy again: ready in its mode (a follower in leader mode is not
	// ready for being a follower, not for its app).
	app.healthy.Store(true)
	// One successful probe makes it healthy again.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, healthPeriod+e2eSlack, true, func(context.Context) (bool, error) {
		_, body, err := leader.probe("/readyz")
		return err == nil && strings.Contains(body, "not the leader"), nil
	})
	if err != nil {
		t.Errorf("old leader's /readyz does not report it a follower once its app is healthy again: %s", mustProbe(t, leader, "/readyz"))
	}
}

// TestHealthAllUnhealthy: every app unhealthy → the leader keeps leading
// for ten lease durations, reports degraded with the reason, and no other
// candidate campaigns.
func TestHealthAllUnhealthy(t *testing.T) {
	t.Parallel()
	g, apps := healthGroup(t, kubeStore(), true, true, true)
	leader := g.WaitLeader(giveUp)
	waitEntries(t, kubeStore(), g, 1, func(string) bool { return true })
	before, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range apps {
		a.healthy.Store(false)
	}
	// Every app fails its probes at once: each candidate's entry says so
	// after healthFailures probes (and a probe's timeout), and the leader
	// sees them all unhealthy.
	degradedBound := healthFailures*healthPeriod + healthPeriod/2 + e2eSlack
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, degradedBound, true, func(context.Context) (bool, error) {
		s, err := leader.state()
		return err == nil && s.Degraded, nil
	})
	if err != nil {
		t.Fatalf("leader %s does not report degraded", leader.name)
	}
	s, _ := leader.state()
	if !strings.Contains(s.DegradedReason, "no healthy candidate to take over") || !strings.Contains(s.DegradedReason, "503") {
		t.Errorf("degradedReason = %q, want the probe's failure and that no healthy candidate can take over", s.DegradedReason)
	}
	if err := holdsFor(10*leaseDuration, 100*time.Millisecond, func() error {
		for _, c := range g.Members() {
			s, err := c.state()
			if err != nil {
				return err
			}
			if c == leader && (!s.IsLeader || s.FencingToken != before.FencingToken || !s.Degraded) {
				return fmt.Errorf("leader %s: isLeader %v, token %d (was %d), degraded %v", c.name, s.IsLeader, s.FencingToken, before.FencingToken, s.Degraded)
			}
			if c != leader && (s.IsLeader || s.Holder != leader.name || s.Degraded) {
				return fmt.Errorf("%s: isLeader %v, holder %q, degraded %v", c.name, s.IsLeader, s.Holder, s.Degraded)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range g.Members() {
		if code, _, _ := c.probe("/readyz"); code != http.StatusServiceUnavailable {
			t.Errorf("%s: /readyz = %d while its app is unhealthy", c.name, code)
		}
	}
	// One app recovers: the leader hands over to it.
	var healthyOne int
	for i, c := range g.Members() {
		if c != leader {
			healthyOne = i
			break
		}
	}
	apps[healthyOne].healthy.Store(true)
	// Its next probe publishes it healthy; the leader's next probe decides
	// to step down, and it hands over.
	next := g.WaitLeader(2*healthPeriod+handoverBound, leader)
	if next != g.Members()[healthyOne] {
		t.Errorf("%s leads, want %s, the only one whose app is healthy", next.name, g.Members()[healthyOne].name)
	}
	if s, _ := leader.state(); s.LastChange == nil || s.LastChange.Reason != "app-unhealthy" || s.Degraded {
		t.Errorf("old leader: lastChange %+v, degraded %v; want app-unhealthy, not degraded", s.LastChange, s.Degraded)
	}
}

// TestHealthNeverHealthy: a candidate whose app has never been healthy
// does not campaign, even though the Lease is free; its /readyz fails in
// candidate mode too.
func TestHealthNeverHealthy(t *testing.T) {
	t.Parallel()
	lease := leaseName(t)
	createCandidatesLease(t, kubeStore(), lease)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	app := newAppHealth(t, false)
	c := startCandidate(t, lease+"-0", candidateOptions{lease: lease, extraArgs: append(app.args(), "--readiness=candidate")})
	g.Add(c)
	// The Lease is created without a holder and may be taken a lease
	// duration later: wait three.
	if err := holdsFor(3*leaseDuration, 100*time.Millisecond, func() error {
		s, err := c.state()
		if err != nil {
			return err
		}
		if s.IsLeader || s.Holder != "" {
			return fmt.Errorf("%s: isLeader %v, holder %q while its app has never been healthy", c.name, s.IsLeader, s.Holder)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	code, body, err := c.probe("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "the app is unhealthy") {
		t.Errorf("/readyz = %d %q, %v; want 503 saying the app is unhealthy", code, body, err)
	}
	if e := candidateEntries(t, kubeStore(), lease)[c.name]; e.Healthy || e.Seq == 0 {
		t.Errorf("its entry = %+v, want published and unhealthy", e)
	}
	// Healthy: it campaigns at once (the Lease is free).
	app.healthy.Store(true)
	g.WaitLeader(healthPeriod + handoverBound)
}

// TestHealthGatingShippedRBAC: candidates with health gating, bound only by
// manifests/base with the health-gating component (built by kustomize as
// users build it), and with watches that start with a list (the default
// against 1.30, 1.31 and 1.33, see noStreamingLists): they elect a leader,
// each publishes its app's health in the candidates Lease and follows the
// others' there, and neither is refused anything — the Role's Lease rule,
// `list` included, covers the candidates Lease too.
func TestHealthGatingShippedRBAC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const namespace = "rbac-health"
	// kustomize takes only relative paths: the overlay sits next to a copy
	// of manifests/.
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "manifests"), os.DirFS(filepath.Join(repoRoot, "manifests"))); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(root, "overlay")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	kustomization := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + namespace +
		"\nresources: [../manifests/base]\ncomponents: [../manifests/components/health-gating]\n"
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.KustomizeBuild(ctx, overlay)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := controlPlane.AdminClient().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyServerSide(t, objs)
	var sa corev1.ServiceAccount
	if err := objs.OneInto("ServiceAccount", &sa); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, sa.Name)
	if err != nil {
		t.Fatal(err)
	}
	const lease = "leader-elector" // the base's; the component ships <lease>-candidates

	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for i := range 2 {
		app := newAppHealth(t, true)
		g.Add(startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{
			lease: lease, namespace: namespace, kubeconfig: kubeconfig, extraArgs: app.args(), env: noStreamingLists,
		}))
	}
	g.WaitLeader(giveUp)
	// Every entry healthy (each candidate writes it once, after its app's
	// first answer), each write an update of the whole Lease (the
	// component ships it) based on the version this candidate had read:
	// the later writer's update carries the other's entry.
	var entries string
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 4*leaseDuration, true, func(context.Context) (bool, error) {
		l, err := controlPlane.AdminClient().CoordinationV1().Leases(namespace).Get(ctx, lease+"-candidates", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		entries = l.Annotations["leader-elector.io/candidates"]
		var got map[string]struct {
			Healthy bool  `json:"healthy"`
			Seq     int64 `json:"seq"`
		}
		if entries == "" || json.Unmarshal([]byte(entries), &got) != nil {
			return false, nil
		}
		for _, c := range g.Members() {
			if e, ok := got[c.name]; !ok || !e.Healthy || e.Seq < 1 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the candidates' entries with the shipped RBAC: %s (%v)", entries, err)
	}
	for _, c := range g.Members() {
		if log := c.log(); strings.Contains(log, "forbidden") || strings.Contains(log, "Failed to watch") {
			t.Errorf("%s was refused something with the shipped health-gating RBAC:\n%s", c.name, log)
		}
	}
}
