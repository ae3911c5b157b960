//go:build integration

package e2e

import (
	"context"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/partition"
)

// TestMetricsScrape scrapes a real candidate's /metrics, run with the
// shipped RBAC: client-go's REST metrics count the Lease's writes by code
// (2xx when the Role allows them, 403 when it does not), client-go's
// leader-election gauge follows the Lease, and only the project's series
// carry the lease and lease_namespace labels.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	apiHost := apiServerHost(t)

	t.Run("allowed", func(t *testing.T) {
		const namespace = "metrics-allowed"
		kubeconfig, lease := applyRBAC(t, namespace, nil, false)
		g := newGroup(t, 1, candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
		leader := g.WaitLeader(giveUp)
		// The gauges are read at scrape time; client-go's own is set once
		// its elector has acquired, which the sidecar may report first.
		fams := scrapeUntil(t, leader, func(f map[string]*dto.MetricFamily) bool {
			s := series(f, "leader_election_master_status", map[string]string{"name": lease})
			return s != nil && s.GetGauge().GetValue() == 1
		})
		// The only PUT the shipped Role allows is the Lease's update.
		if s := series(fams, "rest_client_requests_total", map[string]string{"code": "200", "method": "PUT", "host": apiHost}); s == nil || s.GetCounter().GetValue() < 1 {
			t.Errorf("no rest_client_requests_total{code=\"200\",method=\"PUT\",host=%q} for the Lease's writes", apiHost)
		}
		for _, name := range []string{"rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds"} {
			if s := series(fams, name, map[string]string{"verb": "PUT", "host": apiHost}); s == nil || s.GetHistogram().GetSampleCount() < 1 {
				t.Errorf("no %s{verb=\"PUT\",host=%q}", name, apiHost)
			}
		}
		own := map[string]string{"lease": lease, "lease_namespace": namespace}
		if s := series(fams, "leader_elector_is_leader", own); s == nil || s.GetGauge().GetValue() != 1 {
			t.Errorf("no leader_elector_is_leader%v 1", own)
		}
		checkLabelPolicy(t, fams)
	})

	t.Run("forbidden", func(t *testing.T) {
		// The shipped Role without update: every attempt to acquire the
		// Lease is refused.
		const namespace = "metrics-forbidden"
		_, role, _, _ := shippedRBAC(t)
		leaseRule := role.Rules[0]
		leaseRule.Verbs = slices.DeleteFunc(slices.Clone(leaseRule.Verbs), func(v string) bool { return v == "update" })
		kubeconfig, lease := applyRBAC(t, namespace, append(role.Rules[:0:0], leaseRule, role.Rules[1]), false)
		c := startCandidate(t, "refused", candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
		fams := scrapeUntil(t, c, func(f map[string]*dto.MetricFamily) bool {
			s := series(f, "rest_client_requests_total", map[string]string{"code": "403", "method": "PUT", "host": apiHost})
			return s != nil && s.GetCounter().GetValue() >= 1
		})
		own := map[string]string{"lease": lease, "lease_namespace": namespace}
		if s := series(fams, "leader_elector_is_leader", own); s == nil || s.GetGauge().GetValue() != 0 {
			t.Errorf("no leader_elector_is_leader%v 0", own)
		}
		checkLabelPolicy(t, fams)
	})

	t.Run("partition", func(t *testing.T) {
		// lease is the group's name; the group's series are this member's
		// totals (no partition label); client-go's gauge has one series
		// per partition Lease this member holds.
		g := newPartitionGroup(t, candidateOptions{namespace: "default"})
		c := g.join(1)[0]
		// client-go sets its gauge after its acquire returns, a moment after
		// our lock saw the write that counts a partition owned: wait for both
		// (CI once scraped between the two).
		masterStatus := func(f map[string]*dto.MetricFamily, i int) bool {
			s := series(f, "leader_election_master_status", map[string]string{"name": partition.PartitionLease(g.lease, i)})
			return s != nil && s.GetGauge().GetValue() == 1
		}
		fams := scrapeUntil(t, c, func(f map[string]*dto.MetricFamily) bool {
			s := series(f, "leader_elector_partition_owned", nil)
			if s == nil || s.GetGauge().GetValue() != partitionCount {
				return false
			}
			for i := range partitionCount {
				if !masterStatus(f, i) {
					return false
				}
			}
			return true
		})
		own := map[string]string{"lease": g.lease, "lease_namespace": "default"}
		for _, name := range []string{"leader_elector_partition_owned", "leader_elector_partition_members", "leader_elector_partition_configured", "leader_elector_partition_effective", "leader_elector_partition_rebalances_total", "leader_elector_partition_assignment_duration_seconds"} {
			if f := fams[name]; len(f.GetMetric()) != 1 || series(fams, name, own) == nil {
				t.Errorf("%s: %v, want one series with %v", name, f.GetMetric(), own)
			}
		}
		if s := series(fams, "leader_elector_partition_configured", nil); s.GetGauge().GetValue() != partitionCount {
			t.Errorf("leader_elector_partition_configured = %v, want %d", s.GetGauge().GetValue(), partitionCount)
		}
		if s := series(fams, "leader_elector_partition_effective", nil); s.GetGauge().GetValue() != partitionCount {
			t.Errorf("leader_elector_partition_effective = %v, want %d", s.GetGauge().GetValue(), partitionCount)
		}
		checkLabelPolicy(t, fams)
	})
}

// checkLabelPolicy: lease and lease_namespace on every leader_elector_*
// series but leader_elector_build_info (one series, 1, of the binary) and on
// no other; namespace on none.
func checkLabelPolicy(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	var own, buildInfo int
	for name, f := range fams {
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			_, hasLease := labels["lease"]
			_, hasLeaseNS := labels["lease_namespace"]
			if _, ok := labels["namespace"]; ok {
				t.Errorf("%s%v has a namespace label", name, labels)
			}
			switch {
			case name == "leader_elector_build_info":
				// It describes the binary, as go_info does: no lease labels.
				buildInfo++
				if hasLease || hasLeaseNS || labels["version"] == "" || labels["goversion"] == "" || labels["revision"] == "" || s.GetGauge().GetValue() != 1 {
					t.Errorf("%s%v = %v, want 1 with version, goversion and revision and no lease labels", name, labels, s.GetGauge().GetValue())
				}
			case strings.HasPrefix(name, "leader_elector_"):
				own++
				if !hasLease || !hasLeaseNS {
					t.Errorf("%s%v lacks lease or lease_namespace", name, labels)
				}
			case hasLease || hasLeaseNS:
				t.Errorf("%s%v carries lease or lease_namespace", name, labels)
			}
		}
	}
	if own == 0 {
		t.Error("no leader_elector_* series")
	}
	if buildInfo != 1 {
		t.Errorf("%d leader_elector_build_info series, want 1", buildInfo)
	}
	if s := series(fams, "go_goroutines", nil); s == nil || len(s.GetLabel()) != 0 {
		t.Errorf("go_goroutines: %v, want one series without labels", s)
	}
}

// scrapeUntil scrapes c's /metrics until done holds, and returns the last
// scrape.
func scrapeUntil(t *testing.T, c *candidate, done func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var (
		fams    map[string]*dto.MetricFamily
		lastErr error
	)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		code, body, err := c.probe("/metrics")
		if err != nil || code != 200 {
			lastErr = err
			return false, nil
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err = parser.TextToMetricFamilies(strings.NewReader(body))
		if err != nil {
			return false, err
		}
		return done(fams), nil
	})
	if err != nil {
		var names []string
		for n := range fams {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("%s /metrics: condition not met: %v (last scrape error %v); families: %v\nrest_client_requests_total: %v", c.name, err, lastErr, names, fams["rest_client_requests_total"])
	}
	return fams
}

// series returns the series of the family name whose labels include want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	for _, s := range fams[name].GetMetric() {
		got := map[string]string{}
		for _, l := range s.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && got[k] == v
		}
		if match {
			return s
		}
	}
	return nil
}

// apiServerHost is the host:port client-go puts in the host label.
func apiServerHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(controlPlane.AdminConfig().Host)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
