//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/leader-elector/leader-elector/test/harness"
)

// The tests here run a real Prometheus server (Debian's prometheus package,
// `make monitoring-deps`) on loopback that scrapes real candidates and
// evaluates the shipped alert rules (deploy/prometheus), and check the
// rules' and the dashboard's queries against the metric names the
// candidates expose.

// notYetExposed lists the metric names the rules and the dashboard use that
// the binary does not expose yet, with the change that brings them. The
// names check accepts them; once a name is exposed it fails until the entry
// is removed, so the table only shrinks. Empty: every name is exposed.
var notYetExposed = map[string]string{}

// prometheus is a Prometheus server started by a test.
type prometheus struct {
	t   testing.TB
	url string
}

// startPrometheus starts Prometheus on a loopback port, scraping targets
// (host:port) every second and evaluating the rules of rulesFile every
// second. It is stopped when the test ends.
func startPrometheus(t testing.TB, targets []string, rulesFile string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: install Debian's prometheus package (make monitoring-deps)")
	}
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = fmt.Sprintf("%q", target)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: leader-elector
    static_configs:
      - targets: [%s]
`, rulesFile, strings.Join(quoted, ", "))
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+configPath, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--web.console.templates=", "--web.console.libraries=")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			t.Logf("---- last lines of prometheus' log ----\n%s", harness.TailFile(logPath, 40))
		}
	})
	p := &prometheus{t: t, url: "http://" + addr}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("prometheus exited: %v", cmd.ProcessState)
		default:
		}
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("prometheus (%s) not ready at %s: %v\n%s", strings.Join(cmd.Args, " "), p.url, err, harness.TailFile(logPath, 40))
	}
	return p
}

// get asks the HTTP API and decodes its data field into v.
func (p *prometheus) get(path string, query url.Values, v any) error {
	resp, err := http.Get(p.url + path + "?" + query.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("GET %s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts asks /api/v1/alerts for the pending and firing alerts.
// checkDashboardData evaluates every query of the shipped dashboard in the
// real Prometheus, as Grafana would send it with "All" selected, after
// handovers, a crash, routing and partition mode have run: each must be
// accepted, and each must show data — except the panels of faults that a
// healthy run may not have had (quietWhenHealthy). Grafana itself is not in
// Debian; this is what its panels ask.
func checkDashboardData(t *testing.T, p *prometheus) {
	t.Helper()
	quietWhenHealthy := map[string]bool{"API errors": true}
	withData := 0
	for where, expr := range queriesOf(t) {
		if !strings.HasPrefix(where, "dashboard panel") {
			continue
		}
		var data struct {
			Result []json.RawMessage `json:"result"`
		}
		if err := p.get("/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
			t.Errorf("%s: Prometheus refused it: %v", where, err)
			continue
		}
		title, _, _ := strings.Cut(strings.TrimPrefix(where, `dashboard panel "`), `"`)
		switch {
		case len(data.Result) > 0:
			withData++
		case !quietWhenHealthy[title]:
			t.Errorf("%s shows no data after handovers, a crash, routing and partitions: %s", where, expr)
		}
	}
	t.Logf("MEASURED dashboard: %d of its queries show data in a real Prometheus scraping real sidecars", withData)
}

func (p *prometheus) alerts() ([]promAlert, error) {
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	err := p.get("/api/v1/alerts", nil, &data)
	return data.Alerts, err
}

// scalar evaluates a query that yields at most one sample; ok is false when
// it yields none.
func (p *prometheus) scalar(query string) (value string, ok bool, err error) {
	var data struct {
		Result []struct {
			Value []any `json:"value"`
		} `json:"result"`
	}
	if err := p.get("/api/v1/query", url.Values{"query": {query}}, &data); err != nil {
		return "", false, err
	}
	if len(data.Result) == 0 {
		return "", false, nil
	}
	return fmt.Sprint(data.Result[0].Value[1]), true, nil
}

// metricNames is every metric name Prometheus has scraped.
func (p *prometheus) metricNames() ([]string, error) {
	var names []string
	err := p.get("/api/v1/label/__name__/values", nil, &names)
	return names, err
}

// alertLog polls /api/v1/alerts in the background and keeps, per alert
// name, when it was first seen pending and firing for one Lease.
type alertLog struct {
	mu      sync.Mutex
	pending map[string]time.Time
	firing  map[string]time.Time
	err     error
}

func watchAlerts(t testing.TB, p *prometheus, lease string) *alertLog {
	return watchAlertsWith(t, p, "lease", lease)
}

// watchAlertsWith is watchAlerts for the alerts whose label is value: not
// every alert carries a lease label (those on client-go's series do not).
func watchAlertsWith(t testing.TB, p *prometheus, label, value string) *alertLog {
	l := &alertLog{pending: map[string]time.Time{}, firing: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		_ = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
			alerts, err := p.alerts()
			now := time.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			if err != nil {
				l.err = err
				return false, nil
			}
			for _, a := range alerts {
				if a.Labels[label] != value {
					continue
				}
				seen := l.pending
				if a.State == "firing" {
					seen = l.firing
				}
				if _, ok := seen[a.Labels["alertname"]]; !ok {
					seen[a.Labels["alertname"]] = now
				}
			}
			return false, nil
		})
	}()
	return l
}

// reset forgets what was seen so far.
func (l *alertLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.pending)
	clear(l.firing)
}

func (l *alertLog) seen(alert string) (pending, firing time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pending[alert], l.firing[alert]
}

// testRules writes the shipped rule file with the for values of forOf (by
// alert name) for the test's short timings.
func testRules(t testing.TB, forOf map[string]time.Duration) string {
	t.Helper()
	return testRulesEdited(t, forOf, nil)
}

// testRulesEdited is testRules that also replaces, in the expression of the
// alert named by each key of exprEdits, the text [0] by [1]: the thresholds
// that assume the default timings, scaled to the test's.
func testRulesEdited(t testing.TB, forOf map[string]time.Duration, exprEdits map[string][2]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "leader-elector-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	changed, edited := 0, 0
	for _, g := range file["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			if d, ok := forOf[fmt.Sprint(rule["alert"])]; ok {
				// Prometheus durations take whole units (no "7.5s").
				rule["for"] = fmt.Sprintf("%dms", d.Milliseconds())
				changed++
			}
			if edit, ok := exprEdits[fmt.Sprint(rule["alert"])]; ok {
				expr := fmt.Sprint(rule["expr"])
				if strings.Count(expr, edit[0]) != 1 {
					t.Fatalf("the expression of %s has not exactly one %q:\n%s", rule["alert"], edit[0], expr)
				}
				rule["expr"] = strings.Replace(expr, edit[0], edit[1], 1)
				edited++
			}
		}
	}
	if changed != len(forOf) || edited != len(exprEdits) {
		t.Fatalf("the rule file has %d of the alerts %v and %d of %v", changed, forOf, edited, exprEdits)
	}
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// queriesOf is every PromQL expression of the shipped rule file and
// dashboard, keyed by where it is.
func queriesOf(t testing.TB) map[string]string {
	t.Helper()
	queries := map[string]string{}
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "leader-elector-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			queries["alert "+r.Alert] = r.Expr
		}
	}
	b, err = os.ReadFile(filepath.Join(repoRoot, "deploy", "grafana", "leader-elector-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Type    string
			Targets []struct{ RefID, Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, target := range p.Targets {
			// Grafana's own variables, as Grafana replaces them before
			// Prometheus sees the query.
			expr := strings.NewReplacer("$lease_namespace", ".*", "$lease", ".*").Replace(target.Expr)
			queries[fmt.Sprintf("dashboard panel %q query %s", p.Title, target.RefID)] = expr
		}
	}
	if len(queries) < 10 {
		t.Fatalf("only %d queries found in the rules and the dashboard", len(queries))
	}
	return queries
}

// metricNamesIn parses a PromQL expression (Prometheus' own parser) and
// returns the metric names it selects.
func metricNamesIn(expr string) ([]string, error) {
	node, err := parser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names, nil
}

// checkQueryNames fails for every metric name a shipped query uses that is
// neither in exposed nor in notYetExposed, and for every notYetExposed entry
// that is exposed by now.
func checkQueryNames(t testing.TB, exposed []string) {
	t.Helper()
	for where, expr := range queriesOf(t) {
		names, err := metricNamesIn(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s selects no metric: %s", where, expr)
		}
		for _, name := range names {
			if name == "" {
				t.Errorf("%s: a selector without a metric name: %s", where, expr)
			} else if !slices.Contains(exposed, name) && notYetExposed[name] == "" {
				t.Errorf("%s uses %s, which the binary does not expose", where, name)
			}
		}
	}
	for name, change := range notYetExposed {
		if slices.Contains(exposed, name) {
			t.Errorf("%s is exposed now (%s): remove it from notYetExposed", name, change)
		}
	}
}

// TestPrometheusAlerts: a real Prometheus scrapes three candidates (and one
// in partition mode and one with routing, for their metric names) with the
// shipped rules, their for values scaled to the test's timings. The rules'
// and the dashboard's queries use only names the candidates expose. A
// graceful handover and a crash failover raise neither
// LeaderElectorMultipleLeaders nor LeaderElectorNoLeader; killing every
// candidate fires LeaderElectorNoLeader, starting them again resolves it.
func TestPrometheusAlerts(t *testing.T) {
	t.Parallel()
	const scrape = time.Second
	// The production for values, scaled: no leader for longer than a crash
	// failover (a lease duration and a retry period) seen two scrapes late;
	// two leaders for longer than the scrape skew.
	noLeaderFor := leaseDuration + retryPeriod + 2*scrape + e2eSlack
	multipleFor := 3 * scrape
	rules := testRules(t, map[string]time.Duration{"LeaderElectorNoLeader": noLeaderFor, "LeaderElectorMultipleLeaders": multipleFor})

	lease := leaseName(t)
	ports, err := harness.FreePorts(14)
	if err != nil {
		t.Fatal(err)
	}
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	names := []string{lease + "-0", lease + "-1", lease + "-2"}
	start := func(i int) *candidate {
		c := startCandidate(t, names[i], candidateOptions{lease: lease, ports: ports[2*i : 2*i+2]})
		g.Add(c)
		return c
	}
	var targets []string
	for i := range names {
		start(i)
		targets = append(targets, net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[2*i+1])))
	}
	// Only for the names check and the dashboard's panels: partition mode,
	// routing and the proxy register metrics of their own.
	startCandidate(t, lease+"-partitioned", candidateOptions{lease: lease + "-p", ports: ports[6:8], extraArgs: []string{"--partitions=2"}, startedPath: "/partitions"})
	startCandidate(t, lease+"-routed", candidateOptions{lease: lease + "-r", ports: ports[8:10], extraArgs: []string{"--route=endpointslice", "--service=" + lease + "-r", "--pod-ip=10.0.0.1"}})
	startCandidate(t, lease+"-proxied", candidateOptions{lease: lease + "-x", ports: ports[10:12], extraArgs: []string{
		fmt.Sprintf("--proxy-address=127.0.0.1:%d", ports[12]), fmt.Sprintf("--proxy-peer-address=127.0.0.1:%d", ports[13]), "--proxy-upstream=" + startLineServer(t).Addr().String(),
	}})
	targets = append(targets, net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[7])), net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[9])), net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[11])))

	prom := startPrometheus(t, targets, rules)
	alerts := watchAlerts(t, prom, lease)
	leader := g.WaitLeader(giveUp)

	// Prometheus sees the one leader through the rules' labels.
	leaders := fmt.Sprintf(`sum(leader_elector_is_leader{lease=%q, lease_namespace="default"})`, lease)
	waitQuery(t, prom, leaders, "1", giveUp)

	var exposed []string
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		exposed, err = prom.metricNames()
		return err == nil && slices.Contains(exposed, "leader_elector_partition_configured") && slices.Contains(exposed, "leader_elector_route_writes_total") && slices.Contains(exposed, "leader_elector_proxy_connections_accepted_total"), nil
	}); err != nil {
		t.Fatalf("Prometheus has not scraped the partition-mode, routing and proxy metrics: %v (names %v)", err, exposed)
	}
	checkQueryNames(t, exposed)

	// Graceful handover, then crash failover; each time the old leader comes back.
	restart := func(old *candidate) {
		i := slices.Index(names, old.name)
		start(i)
	}
	leader.signal(syscall.SIGTERM)
	if _, err := leader.waitExit(giveUp); err != nil {
		t.Fatal(err)
	}
	next := g.WaitLeader(handoverBound, leader)
	restart(leader)
	waitQuery(t, prom, leaders, "1", giveUp)

	next.h.Kill()
	crashed := next
	g.WaitLeader(takeoverBound, crashed)
	restart(crashed)
	waitQuery(t, prom, leaders, "1", giveUp)
	// Neither alert fires while the group is healthy again, for longer than
	// either would need to fire had its condition held through the faults.
	settle := max(noLeaderFor, multipleFor) + 3*scrape
	if err := holdsFor(settle, 200*time.Millisecond, func() error {
		for _, name := range []string{"LeaderElectorMultipleLeaders", "LeaderElectorNoLeader"} {
			if _, firing := alerts.seen(name); !firing.IsZero() {
				return fmt.Errorf("%s fired during the graceful handover or the crash failover", name)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"LeaderElectorMultipleLeaders", "LeaderElectorNoLeader"} {
		pending, _ := alerts.seen(name)
		t.Logf("MEASURED %s during a graceful handover and a crash failover: never fired (seen pending: %v)", name, !pending.IsZero())
	}
	checkDashboardData(t, prom)
	alerts.reset()

	// Every candidate killed: no leader.
	for _, c := range g.Members() {
		if c.running() {
			c.h.Kill()
		}
	}
	killed := time.Now()
	firedAt := waitAlert(t, alerts, "LeaderElectorNoLeader", noLeaderFor+giveUp)
	t.Logf("MEASURED LeaderElectorNoLeader fired %v after every candidate was killed (for: %v, scrape and evaluation every %v)", firedAt.Sub(killed).Round(10*time.Millisecond), noLeaderFor, scrape)

	// Started again: it resolves.
	for i := range names {
		start(i)
	}
	restarted := time.Now()
	g.WaitLeader(3 * leaseDuration)
	var resolved time.Time
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		list, err := prom.alerts()
		if err != nil {
			return false, nil
		}
		for _, a := range list {
			if a.Labels["lease"] == lease && a.Labels["alertname"] == "LeaderElectorNoLeader" {
				return false, nil
			}
		}
		resolved = time.Now()
		return true, nil
	}); err != nil {
		t.Fatalf("LeaderElectorNoLeader not resolved 30s after the candidates were started again")
	}
	t.Logf("MEASURED LeaderElectorNoLeader resolved %v after the candidates were started again", resolved.Sub(restarted).Round(10*time.Millisecond))
	if _, firing := alerts.seen("LeaderElectorMultipleLeaders"); !firing.IsZero() {
		t.Errorf("LeaderElectorMultipleLeaders fired")
	}
	if alerts.err != nil {
		t.Logf("last error polling /api/v1/alerts: %v", alerts.err)
	}
}

// waitQuery waits until query yields want.
func waitQuery(t testing.TB, p *prometheus, query, want string, timeout time.Duration) {
	t.Helper()
	var got string
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		v, ok, err := p.scalar(query)
		got = v
		return err == nil && ok && v == want, nil
	}); err != nil {
		t.Fatalf("%s = %q, want %s within %v", query, got, want, timeout)
	}
}

// waitAlert waits until alert is seen firing and returns when it was first seen so.
func waitAlert(t testing.TB, l *alertLog, alert string, timeout time.Duration) time.Time {
	t.Helper()
	var firing time.Time
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, firing = l.seen(alert)
		return !firing.IsZero(), nil
	}); err != nil {
		t.Fatalf("%s not firing within %v", alert, timeout)
	}
	return firing
}
