//go:build integration

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
)

// TestPrometheusAlertsOnFaults: each shipped alert other than the two of
// TestPrometheusAlerts fires, in a real Prometheus scraping real candidates,
// on the fault it is meant for, and does not fire in the healthy state
// before it. Each case runs its own Prometheus and candidates, with the
// rule's for (and, for LeaderElectorRenewalStale, the renew deadline it
// assumes) scaled to the test's timings, and logs how long after the fault
// the alert fired.
func TestPrometheusAlertsOnFaults(t *testing.T) {
	const scrape = time.Second
	// Several evaluations of the condition; the production values (minutes)
	// scaled as TestPrometheusAlerts scales LeaderElectorNoLeader's.
	const faultFor = 5 * scrape
	// The healthy state is held for longer than the rule would need to
	// fire had its condition held from the start.
	const healthy = faultFor + 3*scrape

	t.Run("LeaderElectorAPIRequestsRefused", func(t *testing.T) {
		// The shipped RBAC, then the Role loses `update` on the Lease (an
		// edited or half-applied Role): the leader's renewals, and every
		// attempt to acquire after it steps down, get 403.
		const namespace = "prom-refused"
		kubeconfig, lease := applyRBAC(t, namespace, nil, false)
		c := startCandidate(t, "refused-0", candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
		waitLeading(t, c, giveUp)
		// Beside it, another client-go program (an app, an operator) whose
		// requests are refused all along, healthy state included: the
		// alert is the sidecar's, and must not fire for it.
		other := startOtherClientGoProgram(t, namespace, kubeconfig)
		prom := startPrometheus(t, []string{metricsTarget(t, c), other}, testRules(t, map[string]time.Duration{"LeaderElectorAPIRequestsRefused": faultFor}))
		waitQuery(t, prom, `sum(rest_client_requests_total{code="200",method="PUT"}) > bool 0`, "1", giveUp)
		waitQuery(t, prom, `sum(rest_client_requests_total{code="403",instance="`+other+`"}) > bool 0`, "1", giveUp)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorAPIRequestsRefused")
		proveAlert(t, prom, alerts, "LeaderElectorAPIRequestsRefused", faultFor, healthy, faultFor+giveUp, "the Role lost update on the Lease", func() {
			roles := controlPlane.AdminClient().RbacV1().Roles(namespace)
			role, err := roles.Get(context.Background(), "leader-elector", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			removed := false
			for i, r := range role.Rules {
				if slices.Contains(r.Resources, "leases") {
					role.Rules[i].Verbs = slices.DeleteFunc(r.Verbs, func(v string) bool { removed = removed || v == "update"; return v == "update" })
				}
			}
			if !removed {
				t.Fatalf("the shipped Role has no update on leases: %+v", role.Rules)
			}
			if _, err := roles.Update(context.Background(), role, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	})

	t.Run("LeaderElectorRouteErrors", func(t *testing.T) {
		// The shipped endpointslice example; then its EndpointSlice is
		// deleted (the sidecar may not create it): the leader's next
		// check of the routing fails, and every retry after it.
		const namespace = "prom-route"
		spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
		g := routedGroup(t, spec, namespace, lease, kubeconfig, "pod-a", "pod-b")
		g.WaitLeader(giveUp)
		prom := startPrometheus(t, metricsTargets(t, g.Members()), testRules(t, map[string]time.Duration{"LeaderElectorRouteErrors": faultFor}))
		waitQuery(t, prom, `sum(leader_elector_route_writes_total) > bool 0`, "1", giveUp)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorRouteErrors")
		proveAlert(t, prom, alerts, "LeaderElectorRouteErrors", faultFor, healthy, faultFor+leaseDuration+giveUp, "the EndpointSlice was deleted", func() {
			if err := controlPlane.AdminClient().DiscoveryV1().EndpointSlices(namespace).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				t.Fatal(err)
			}
		})
	})

	t.Run("LeaderElectorRouteTokenOverridden", func(t *testing.T) {
		// The shipped endpointslice example; then the slice is planted
		// with a token no term wrote (as the admin: the policy refuses it
		// from the sidecar's token): the leader overwrites it at its next
		// check. The rule has no for to scale.
		const namespace = "prom-route-token"
		spec, _, kubeconfig, lease := routedExample(t, "example-endpointslice", namespace)
		slice := watchSlice(t, namespace, lease)
		g := routedGroup(t, spec, namespace, lease, kubeconfig, "pod-a", "pod-b")
		g.WaitLeader(giveUp)
		prom := startPrometheus(t, metricsTargets(t, g.Members()), testRules(t, nil))
		waitQuery(t, prom, `sum(leader_elector_route_writes_total) > bool 0`, "1", giveUp)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorRouteTokenOverridden")
		proveAlert(t, prom, alerts, "LeaderElectorRouteTokenOverridden", 0, healthy, repairBound+giveUp, "the slice was planted with a token no term wrote", func() {
			plantSlice(t, slice, controlPlane.AdminClient(), namespace, lease, beyondTheLease)
		})
	})

	t.Run("LeaderElectorPartitionsUnowned", func(t *testing.T) {
		// A group of two owning one partition each; then every member is
		// killed.
		lease := leaseName(t)
		ports, err := harness.FreePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		var members []*candidate
		for i := range 2 {
			members = append(members, startCandidate(t, fmt.Sprintf("%s-%d", lease, i), candidateOptions{lease: lease, ports: ports[2*i : 2*i+2], extraArgs: []string{"--partitions=2"}, startedPath: "/partitions"}))
		}
		prom := startPrometheus(t, metricsTargets(t, members), testRules(t, map[string]time.Duration{"LeaderElectorPartitionsUnowned": faultFor}))
		// Healthy once the assignment is fair (one each): until then a
		// partition handed over is unowned for a moment, which the rule's
		// for covers but which would show pending.
		waitQuery(t, prom, `(sum(leader_elector_partition_owned) == bool 2) * (max(leader_elector_partition_owned) == bool 1)`, "1", 60*time.Second)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorPartitionsUnowned")
		proveAlert(t, prom, alerts, "LeaderElectorPartitionsUnowned", faultFor, healthy, faultFor+giveUp, "every member of the group was killed", func() {
			for _, c := range members {
				c.h.Kill()
			}
		})
	})

	// Last: it freezes the shared API server.
	t.Run("LeaderElectorProxyRefusing", func(t *testing.T) {
		// A leader whose proxy forwards a client's connection every 100 ms
		// to its app; then the app stops listening: each connection waits
		// --proxy-wait for it and is closed unforwarded (unreachable).
		lease := leaseName(t)
		app := startLineServer(t)
		ports, err := harness.FreePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		proxyAddr := fmt.Sprintf("127.0.0.1:%d", ports[2])
		c := startCandidate(t, lease+"-0", candidateOptions{lease: lease, ports: ports[:2], extraArgs: []string{
			"--proxy-address=" + proxyAddr,
			fmt.Sprintf("--proxy-peer-address=127.0.0.1:%d", ports[3]),
			"--proxy-upstream=" + app.Addr().String(),
			"--proxy-wait=500ms",
		}})
		waitLeading(t, c, giveUp)
		clientEvery(t, 100*time.Millisecond, func() { _ = askOneLine(proxyAddr, 2*time.Second) })
		prom := startPrometheus(t, []string{metricsTarget(t, c)}, testRules(t, map[string]time.Duration{"LeaderElectorProxyRefusing": faultFor}))
		waitQuery(t, prom, `sum(leader_elector_proxy_connections_forwarded_total{to="local"}) > bool 0`, "1", giveUp)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorProxyRefusing")
		proveAlert(t, prom, alerts, "LeaderElectorProxyRefusing", faultFor, healthy, faultFor+giveUp, "the app stopped listening", func() {
			_ = app.Close()
		})
	})

	t.Run("LeaderElectorRenewalStale", func(t *testing.T) {
		// A leader renewing; then the API server freezes (SIGSTOP: its
		// connections hang), so that no candidate writes the Lease. A
		// frozen leader is not this alert's fault: another candidate takes
		// over and renews (and a lone one's series go stale, which
		// LeaderElectorNoLeader reports).
		g := newGroup(t, 2, candidateOptions{})
		g.WaitLeader(giveUp)
		rules := testRulesEdited(t, map[string]time.Duration{"LeaderElectorRenewalStale": faultFor},
			map[string][2]string{"LeaderElectorRenewalStale": {") > 10", fmt.Sprintf(") > %d", int(renewDeadline.Seconds()))}})
		prom := startPrometheus(t, metricsTargets(t, g.Members()), rules)
		waitQuery(t, prom, `max(leader_elector_last_renew_timestamp_seconds) > bool 0`, "1", giveUp)
		alerts := watchAlertsWith(t, prom, "alertname", "LeaderElectorRenewalStale")
		frozen := false
		thaw := func() {
			if frozen {
				if err := controlPlane.ThawAPIServer(); err != nil {
					t.Errorf("thaw the API server: %v", err)
				}
				frozen = false
			}
		}
		t.Cleanup(thaw)
		proveAlert(t, prom, alerts, "LeaderElectorRenewalStale", faultFor, healthy, faultFor+renewDeadline+giveUp, "the API server was frozen", func() {
			if err := controlPlane.FreezeAPIServer(); err != nil {
				t.Fatal(err)
			}
			frozen = true
		})
		thaw()
		// The next tests need the API server, and a leader shows it serves.
		g.WaitLeader(3 * leaseDuration)
	})
}

// proveAlert checks that alert (its for scaled to forOf) neither fires nor
// is pending for healthy, then runs inject and waits up to timeout for alert
// to fire, logging how long it took.
func proveAlert(t *testing.T, prom *prometheus, alerts *alertLog, alert string, forOf, healthy, timeout time.Duration, fault string, inject func()) {
	t.Helper()
	// The rules are evaluated once a scrape interval: an alert pending on
	// the start-up (a candidate not leading yet, partitions not yet
	// assigned) is listed until the evaluation after the state turned
	// healthy.
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		list, err := prom.alerts()
		if err != nil {
			return false, nil
		}
		return !slices.ContainsFunc(list, func(a promAlert) bool { return a.Labels["alertname"] == alert }), nil
	}); err != nil {
		t.Fatalf("%s still pending or firing 30s after the state turned healthy", alert)
	}
	alerts.reset()
	began := time.Now()
	if err := holdsFor(healthy, 200*time.Millisecond, func() error {
		if _, firing := alerts.seen(alert); !firing.IsZero() {
			return fmt.Errorf("%s fired in the healthy state, before %s", alert, fault)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if pending, _ := alerts.seen(alert); !pending.IsZero() {
		t.Errorf("%s was pending in the healthy state, %v after it began, before %s", alert, pending.Sub(began).Round(10*time.Millisecond), fault)
	}
	injected := time.Now()
	inject()
	fired := waitAlert(t, alerts, alert, timeout)
	t.Logf("MEASURED %s fired %v after %s (healthy for %v before, for: %v, scrape and evaluation every 1s)", alert, fired.Sub(injected).Round(10*time.Millisecond), fault, healthy, forOf)
}

// waitLeading waits until c reports itself the leader.
func waitLeading(t *testing.T, c *candidate, timeout time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		s, err := c.state()
		return err == nil && s.IsLeader, nil
	}); err != nil {
		t.Fatalf("%s does not lead within %v", c.name, timeout)
	}
}

// metricsTarget is the host:port Prometheus scrapes c's /metrics on (the
// probe address).
func metricsTarget(t *testing.T, c *candidate) string {
	t.Helper()
	u, err := url.Parse(c.probeURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func metricsTargets(t *testing.T, cs []*candidate) []string {
	t.Helper()
	var targets []string
	for _, c := range cs {
		targets = append(targets, metricsTarget(t, c))
	}
	return targets
}

// startLineServer listens on loopback and answers each line of each
// connection with "ok": an app behind the proxy. Closing it makes the app
// stop listening.
func startLineServer(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				r := bufio.NewReader(conn)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
					if _, err := fmt.Fprintln(conn, "ok"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l
}

// askOneLine connects to addr, sends a line and reads one back, within
// timeout.
func askOneLine(addr string, timeout time.Duration) error {
	conn, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err := fmt.Fprintln(conn, "hello"); err != nil {
		return err
	}
	_, err = bufio.NewReader(conn).ReadString('\n')
	return err
}

// clientEvery calls ask every interval, each call in a goroutine of its
// own, until the test ends.
func clientEvery(t *testing.T, interval time.Duration, ask func()) {
	t.Helper()
	stop := make(chan struct{})
	var running sync.WaitGroup
	t.Cleanup(func() { close(stop); running.Wait() })
	running.Add(1)
	go func() {
		defer running.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			running.Add(1)
			go func() { defer running.Done(); ask() }()
		}
	}()
}
