// Package deploy holds the monitoring that ships (Prometheus rules, Grafana
// dashboard); its test keeps the two in step where they must say the same.
package deploy

import (
	"encoding/json"
	"os"
	"regexp"
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
	const unowned = "Partitions without an owner"
	got, ok := panels[unowned]
	if !ok {
		t.Fatalf("no dashboard panel %q", unowned)
	}
	// The alert's expression, then 0 for a group with every partition
	// owned (the alert's is empty then, and an empty panel reads as "no
	// data").
	filters := regexp.MustCompile(`\{lease_namespace=~"\$lease_namespace", lease=~"\$lease"\}`)
	a, p := squash(alerts["LeaderElectorPartitionsUnowned"]), squash(filters.ReplaceAllString(got, ""))
	if want := "(" + a + ")or"; !strings.HasPrefix(p, want) {
		t.Errorf("panel %q shows\n%s\nwant it to start with alert LeaderElectorPartitionsUnowned's\n%s", unowned, p, want)
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
