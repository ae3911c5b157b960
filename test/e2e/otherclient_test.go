//go:build integration

package e2e

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// otherRequests is rest_client_requests_total as any client-go program
// that exports its metrics has it (k8s.io/component-base's name, labels
// and help): the test process is such a program beside the sidecar.
var (
	otherRequests = promclient.NewCounterVec(promclient.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	registerOtherMetrics sync.Once
)

type otherResult struct{}

func (otherResult) Increment(_ context.Context, code, method, host string) {
	otherRequests.WithLabelValues(code, method, host).Inc()
}

// startOtherClientGoProgram runs, in the test process, a client-go program
// that is not the sidecar (an app or operator in the same namespace):
// with kubeconfig's credentials it lists the namespace's Secrets, which the
// sidecar's Role does not allow, every 200 ms, so that its requests are
// refused 403, and it serves its client-go metrics on loopback. It returns
// the scrape target (host:port); it stops with the test.
func startOtherClientGoProgram(t *testing.T, namespace, kubeconfig string) string {
	t.Helper()
	registerOtherMetrics.Do(func() {
		clientmetrics.Register(clientmetrics.RegisterOpts{RequestResult: otherResult{}})
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.UserAgent = "other-client-go-program"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := promclient.NewRegistry()
	reg.MustRegister(otherRequests)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = client.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = srv.Close()
	})
	return ln.Addr().String()
}
