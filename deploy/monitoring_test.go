// Package deploy holds the monitoring that ships (Prometheus rules, Grafana
// dashboard); its test keeps the two in step where they must say the same.
package deploy

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestDashboardMatchesTheAlerts: a panel that shows an alert's condition
// uses the alert's expression (less the dashboard's variable filters), and
// every panel of client-go's metrics keeps, as the alert does, only the
// sidecar's own series: every client-go program exports the same names.
func TestDashboardMatchesTheAlerts(t *testing.T) {
	alerts := alertExprs(t)
	panels := panelExprs(t)
	// Each panel's first query is the alert's expression, then 0 for the
	// series the alert's is empty for (an empty panel reads as "no data").
	for panel, alert := range map[string]string{
		"Partitions without an owner": "LeaderElectorPartitionsUnowned",
		"Proxy refusals":              "LeaderElectorProxyRefusing",
	} {
		got, ok := panels[panel]
		if !ok {
			t.Errorf("no dashboard panel %q", panel)
			continue
		}
		a, p := squash(alerts[alert]), squash(withoutFilters(got))
		if a == "" {
			t.Errorf("no alert %s", alert)
		}
		if want := "(" + a + ")or"; !strings.HasPrefix(p, want) {
			t.Errorf("panel %q shows\n%s\nwant it to start with alert %s's\n%s", panel, p, alert, want)
		}
	}
	const own = "and on (instance) leader_elector_build_info"
	for where, expr := range panels {
		if strings.Contains(expr, "rest_client_") && !strings.Contains(expr, own) {
			t.Errorf("panel %q reads client-go's metrics of every program: %s (want %q)", where, expr, own)
		}
	}
	for name, expr := range alerts {
		if strings.Contains(expr, "rest_client_") && !strings.Contains(squash(expr), squash(own)) {
			t.Errorf("alert %s reads client-go's metrics of every program (want %q)", name, own)
		}
	}
}

// withoutFilters drops the dashboard's variable filters from a query.
func withoutFilters(expr string) string {
	const filters = `lease_namespace=~"$lease_namespace", lease=~"$lease"`
	expr = strings.ReplaceAll(expr, "{"+filters+"}", "")
	return strings.ReplaceAll(expr, filters+", ", "")
}

// squash drops white space, which PromQL ignores.
func squash(s string) string { return strings.Join(strings.Fields(s), "") }

func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("prometheus/leader-elector-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] = r.Expr
		}
	}
	return exprs
}

// panelExprs maps each panel's title (and target) to its query.
func panelExprs(t *testing.T) map[string]string {
	t.Helper()
	data, err := os.ReadFile("grafana/leader-elector-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ RefID, Expr string }
		}
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{}
	for _, p := range dash.Panels {
		for i, target := range p.Targets {
			key := p.Title
			if i > 0 {
				key += " " + target.RefID
			}
			exprs[key] = target.Expr
		}
	}
	return exprs
}
