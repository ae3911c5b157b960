package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/serverclock"
)

// TestMetricsLabels checks the label policy: the project's series carry
// lease and lease_namespace, nothing else carries them (not
// leader_elector_build_info either: it describes the binary, as go_info
// does), and no series of ours has a namespace label (Prometheus' target
// label).
func TestMetricsLabels(t *testing.T) {
	m := newTestMetrics(t)
	fams, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var own, goProcess int
	for _, f := range fams {
		name := f.GetName()
		for _, s := range f.GetMetric() {
			labels := labelMap(s)
			if _, ok := labels["namespace"]; ok {
				t.Errorf("%s%v has a namespace label, which collides with Prometheus' target label", name, labels)
			}
			switch {
			case strings.HasPrefix(name, "leader_elector_") && name != "leader_elector_build_info":
				own++
				if labels["lease"] != "my-lease" || labels["lease_namespace"] != "my-ns" {
					t.Errorf("%s%v: want lease=my-lease and lease_namespace=my-ns", name, labels)
				}
			default:
				if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
					goProcess++
				}
				for _, l := range []string{"lease", "lease_namespace"} {
					if _, ok := labels[l]; ok {
						t.Errorf("%s%v carries %s; only leader_elector_* series may", name, labels, l)
					}
				}
			}
		}
	}
	if own == 0 || goProcess == 0 {
		t.Errorf("gathered %d leader_elector_* and %d go_*/process_* series; want some of each", own, goProcess)
	}
}

// TestRESTClientMetrics checks that client-go's requests are counted on the
// registry, by code, method and host, with their latency.
func TestRESTClientMetrics(t *testing.T) {
	m := newTestMetrics(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/forbidden") {
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"allowed","namespace":"my-ns"}}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := client.CoordinationV1().Leases("my-ns").Get(ctx, "allowed", metav1.GetOptions{}); err != nil {
		t.Fatalf("get the allowed Lease: %v", err)
	}
	if _, err := client.CoordinationV1().Leases("my-ns").Get(ctx, "forbidden", metav1.GetOptions{}); err == nil {
		t.Fatal("get the forbidden Lease: no error")
	}

	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	fams := gatherMap(t, m.registry)
	for _, code := range []string{"200", "403"} {
		want := map[string]string{"code": code, "method": "GET", "host": u.Host}
		if c := find(fams["rest_client_requests_total"], want); c == nil || c.GetCounter().GetValue() < 1 {
			t.Errorf("rest_client_requests_total%v: no count", want)
		}
	}
	for _, name := range []string{"rest_client_request_duration_seconds", "rest_client_rate_limiter_duration_seconds"} {
		want := map[string]string{"verb": "GET", "host": u.Host}
		if h := find(fams[name], want); h == nil || h.GetHistogram().GetSampleCount() < 2 {
			t.Errorf("%s%v: want 2 or more observations", name, want)
		}
	}
}

// newTestMetrics builds the registry as Run does, with the election's
// collectors. Tests build several registries: client-go's hooks are
// installed once and feed them all.
func newTestMetrics(t *testing.T) *metrics {
	t.Helper()
	cfg := Config{Election: election.Config{LeaseSpec: election.LeaseSpec{Namespace: "my-ns", Name: "my-lease"}}}
	m, err := newMetrics(cfg)
	if err != nil {
		t.Fatal(err)
	}
	own := prometheus.NewGauge(prometheus.GaugeOpts{Name: "leader_elector_is_leader", Help: "Test gauge."})
	if err := m.registerOwn([]prometheus.Collector{own}); err != nil {
		t.Fatal(err)
	}
	return m
}

func gatherMap(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// find returns the family's series whose labels include want.
func find(f *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, s := range f.GetMetric() {
		labels := labelMap(s)
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
			}
		}
		if match {
			return s
		}
	}
	return nil
}

func labelMap(s *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range s.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// TestBuildInfoScraped: GET /metrics of the probe server, as Run builds
// it, serves leader_elector_build_info = 1 labelled by the version given
// in Config (main.version), the revision and the Go version, and no
// labels of ours: it describes the binary, not the Lease.
func TestBuildInfoScraped(t *testing.T) {
	cfg := Config{
		Version:  "1.2.3",
		Revision: "0123abc",
		Election: election.Config{LeaseSpec: election.LeaseSpec{
			Namespace: "my-ns", Name: "my-lease", Identity: "pod-a",
			Timings: leasetimings.Timings{LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second},
		}},
		Readiness: httpapi.ReadyWhenLeader,
	}
	m, err := newMetrics(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	w, err := newWorkload(cfg, &clients{requests: client, watches: client, serverClock: serverclock.New(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.registerOwn(w.collectors); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	w.probes(m.registry).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", rec.Code, rec.Body)
	}
	want := `leader_elector_build_info{goversion="` + runtime.Version() + `",revision="0123abc",version="1.2.3"} 1`
	if !strings.Contains(rec.Body.String(), "\n"+want+"\n") {
		t.Errorf("GET /metrics has no line %s:\n%s", want, rec.Body)
	}
	if !strings.Contains(rec.Body.String(), "# TYPE leader_elector_build_info gauge") {
		t.Error("leader_elector_build_info is not typed gauge")
	}
}

// TestBuildInfoDefaults: without a version or revision from the build, the
// labels say "unknown" (a label with an empty value is no label at all to
// Prometheus), and the revision is the one Go stamped, if any.
func TestBuildInfoDefaults(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(buildInfo("", ""))
	s := find(gatherMap(t, reg)["leader_elector_build_info"], map[string]string{"version": "unknown", "goversion": runtime.Version()})
	if s == nil || s.GetGauge().GetValue() != 1 {
		t.Fatalf("leader_elector_build_info: want 1 with version=unknown, got %v", s)
	}
	if rev := labelMap(s)["revision"]; rev == "" {
		t.Error("empty revision label")
	}
}
