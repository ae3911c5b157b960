//go:build integration

package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The chart's health gating as the node test runs it: short election
// timings (ten lease durations must fit in a test), the chart's default
// probe settings (a probe every 2 s, 3 failures).
const (
	nodeHealthPeriod   = 2 * time.Second
	nodeHealthFailures = 3
)

// TestChartHealthGating installs the chart's demo with healthGating: the
// demo app's /healthz answers while /tmp/www/healthz exists in its
// container, and the test removes that file as `kubectl exec … rm` would
// (through /proc/<pid>/root of the app's process: the node runs no exec
// streaming). The leader's app unhealthy → a healthy pod leads within
// failures × period + one handover; every app unhealthy → no change of
// leadership for ten lease durations and the leader reports degraded.
func TestChartHealthGating(t *testing.T) {
	d := deployChart(t, "healthGating.enabled=true", "demo.replicas=3",
		"election.leaseDurationSeconds=4", "election.renewDeadlineSeconds=2", "election.retryPeriodSeconds=1")
	leader := d.faultReadyLeader(t)
	d.waitCandidatesHealthy(t)

	before := d.term(t)
	flipped := time.Now()
	d.setAppHealthy(t, leader, false)
	next := d.waitSettledExcept(t, d.settleTimeout(), leader.Name)
	took := time.Since(flipped)
	// The leader releases at once; a standby acquires on the release's
	// watch event and the kubelet sees it Ready at its next probe.
	handover := readinessPeriod + nodeSlack
	bound := nodeHealthFailures*nodeHealthPeriod + nodeHealthPeriod/2 + handover
	t.Logf("MEASURED health step-down on the node (leader's app unhealthy → %s leads, is Ready and the Service's only endpoint): %v (bound %v = %d × %v + %v probe timeout + %v handover and readiness)", next, took.Round(time.Millisecond), bound, nodeHealthFailures, nodeHealthPeriod, nodeHealthPeriod/2, handover)
	if took > bound {
		t.Errorf("leadership moved after %v, more than the bound %v", took, bound)
	}
	if after := d.term(t); after <= before {
		t.Errorf("fencing token %d after the step-down, was %d", after, before)
	}
	d.checkLeaseEvents(t, []string{fmt.Sprintf("%s stopped leading (reason app-unhealthy, fencing token %d)", leader.Name, before)})

	// Every app unhealthy: the leader keeps leading, degraded.
	pods, err := d.pods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods {
		d.setAppHealthy(t, &pods[i], false)
	}
	leaderPod, err := d.client.CoreV1().Pods(d.namespace).Get(context.Background(), next, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	metric := func() string {
		resp, err := httpClient.Get("http://" + leaderPod.Status.PodIP + ":8080/metrics")
		if err != nil {
			return err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, nodeGiveUp, true, func(context.Context) (bool, error) {
		return strings.Contains(metric(), "\nleader_elector_degraded{") && hasSeries(metric(), "leader_elector_degraded", "1"), nil
	})
	if err != nil {
		t.Fatalf("leader %s does not report degraded: %s", next, grepSeries(metric(), "leader_elector_degraded"))
	}
	term := d.term(t)
	ten := 10 * d.leaseDur
	start := time.Now()
	// Sampled every half second for the whole interval: the condition
	// fails the poll at its first violation.
	// The reads use their own context: one still on its way when the
	// interval ends is not a violation.
	err = wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, ten, true, func(context.Context) (bool, error) {
		holder, err := d.holder(context.Background())
		if err != nil {
			return false, err
		}
		if now := d.term(t); holder != next || now != term {
			return false, fmt.Errorf("leadership changed after %v of an outage of every app: holder %q (was %s), token %d (was %d)", since(start), holder, next, now, term)
		}
		if !hasSeries(metric(), "leader_elector_degraded", "1") {
			return false, fmt.Errorf("leader %s no longer degraded after %v", next, since(start))
		}
		return false, nil
	})
	if !wait.Interrupted(err) {
		t.Fatal(err)
	}
	t.Logf("every app unhealthy: %s kept leading (token %d) and degraded for %v (ten lease durations)", next, term, ten)
}

// hasSeries reports whether the metrics text has series name with value.
func hasSeries(text, name, value string) bool {
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") && strings.HasSuffix(line, " "+value) {
			return true
		}
	}
	return false
}

func grepSeries(text, name string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// setAppHealthy creates or removes /tmp/www/healthz in the pod's app
// container, through its process's root.
func (d *deployment) setAppHealthy(t *testing.T, pod *corev1.Pod, healthy bool) {
	t.Helper()
	if err := setAppHealth(context.Background(), pod, healthy); err != nil {
		t.Fatal(err)
	}
}

func setAppHealth(ctx context.Context, pod *corev1.Pod, healthy bool) error {
	id := containerIDOf(pod, "app")
	if id == "" {
		return fmt.Errorf("%s: no running app container", pod.Name)
	}
	pid, err := theNode.ContainerPID(ctx, id)
	if err != nil {
		return err
	}
	path := filepath.Join("/proc", fmt.Sprint(pid), "root", "tmp", "www", "healthz")
	if healthy {
		return os.WriteFile(path, []byte("ok\n"), 0o644)
	}
	if err = os.Remove(path); errors.Is(err, fs.ErrNotExist) {
		return nil // already unhealthy
	}
	return err
}

// waitCandidatesHealthy waits until every pod's entry in the candidates
// Lease says healthy, with its last probe passed (each pod counts the
// others' entries from its first read of them).
func (d *deployment) waitCandidatesHealthy(t *testing.T) {
	t.Helper()
	var raw string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, d.settleTimeout(), true, func(ctx context.Context) (bool, error) {
		l, err := d.client.CoordinationV1().Leases(d.namespace).Get(ctx, d.lease+"-candidates", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		raw = l.Annotations["leader-elector.io/candidates"]
		var entries map[string]struct {
			Healthy bool `json:"healthy"`
			OK      bool `json:"ok"`
		}
		if json.Unmarshal([]byte(raw), &entries) != nil {
			return false, nil
		}
		pods, err := d.pods(ctx)
		if err != nil || len(pods) == 0 {
			return false, nil
		}
		for _, p := range pods {
			e, ok := entries[p.Name]
			if !ok || !e.Healthy || !e.OK {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the candidates' entries are not all healthy: %s", raw)
	}
}
