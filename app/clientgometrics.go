package app

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/leaderelection"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go reports its REST requests and its electors' leadership through
// process-global hooks (tools/metrics.Register, leaderelection.SetProvider)
// that take effect once. The collectors behind them are therefore global
// too, and each registry the process builds (one in the sidecar, several in
// tests) registers the same ones.
//
// Names, labels and buckets are those of Kubernetes' own components
// (k8s.io/component-base/metrics/prometheus/restclient and
// .../clientgo/leaderelection), so that dashboards and alerts written for
// them work here. Why not import those packages: they register into
// component-base's global legacy registry from init(), not into ours, and
// pull in component-base/metrics, OpenTelemetry and a newer client_golang;
// the stripped binary grew by 312 KiB for what is these few adapters.
var (
	// k8sLatencyBuckets are component-base's buckets for client-go's
	// request and rate-limiter latencies.
	k8sLatencyBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}

	restRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	restRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: k8sLatencyBuckets,
	}, []string{"verb", "host"})
	restRateLimiterDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
		Buckets: k8sLatencyBuckets,
	}, []string{"verb", "host"})
	restRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_request_retries_total",
		Help: "Number of request retries, partitioned by status code, verb, and host.",
	}, []string{"code", "verb", "host"})

	leaderStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "leader_election_master_status",
		Help: "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})
	leaderSlowpath = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "leader_election_slowpath_total",
		Help: "Total number of slow path exercised in renewing leader leases. 'name' is the string used to identify the lease. Please make sure to group by name.",
	}, []string{"name"})

	hookClientGoOnce sync.Once
	hookClientGoErr  error
	ourRequestResult = resultAdapter{restRequests}
)

// clientGoCollectors installs client-go's metric hooks, once per process,
// and returns the collectors they feed. It fails if someone else installed
// client-go's REST hooks first: ours would then be ignored and the
// rest_client_* series would stay empty without a word.
func clientGoCollectors() ([]prometheus.Collector, error) {
	hookClientGoOnce.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestResult:      ourRequestResult,
			RequestLatency:     latencyAdapter{restRequestDuration},
			RateLimiterLatency: latencyAdapter{restRateLimiterDuration},
			RequestRetry:       retryAdapter{restRetries},
		})
		if clientmetrics.RequestResult != clientmetrics.ResultMetric(ourRequestResult) {
			hookClientGoErr = errors.New("client-go's REST client metrics were registered by another package; rest_client_* would not be exported")
		}
		// Partition mode runs many electors: each reports under its own
		// Lease's name.
		leaderelection.SetProvider(leaderProvider{})
	})
	return []prometheus.Collector{
		restRequests, restRequestDuration, restRateLimiterDuration, restRetries,
		leaderStatus, leaderSlowpath,
	}, hookClientGoErr
}

type resultAdapter struct{ m *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.m.WithLabelValues(code, method, host).Inc()
}

type latencyAdapter struct{ m *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.m.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type retryAdapter struct{ m *prometheus.CounterVec }

func (a retryAdapter) IncrementRetry(_ context.Context, code, verb, host string) {
	a.m.WithLabelValues(code, verb, host).Inc()
}

type leaderProvider struct{}

func (leaderProvider) NewLeaderMetric() leaderelection.LeaderMetric { return leaderMetric{} }

type leaderMetric struct{}

func (leaderMetric) On(name string)                { leaderStatus.WithLabelValues(name).Set(1) }
func (leaderMetric) Off(name string)               { leaderStatus.WithLabelValues(name).Set(0) }
func (leaderMetric) SlowpathExercised(name string) { leaderSlowpath.WithLabelValues(name).Inc() }
