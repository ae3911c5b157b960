package httpapi

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestReadyzGated: the gate (health gating's "the app is healthy") fails
// /readyz in every readiness mode, even on the leader, and lets the mode
// decide when it passes.
func TestReadyzGated(t *testing.T) {
	unhealthy := func() error {
		return errors.New("the app is unhealthy: GET http://127.0.0.1:8081/healthz answered 503 Service Unavailable")
	}
	healthy := func() error { return nil }
	for _, mode := range []Readiness{ReadyWhenLeader, ReadyWhenCandidate} {
		el := newFakeElection(leaderState())
		w := serve(NewGatedProbeHandler(el, mode, unhealthy, prometheus.NewRegistry()), newRequest(t, http.MethodGet, "/readyz"))
		checkText(t, w.Code, w.Header(), w.Body.String(), http.StatusServiceUnavailable,
			"not ready: the app is unhealthy: GET http://127.0.0.1:8081/healthz answered 503 Service Unavailable\n")

		w = serve(NewGatedProbeHandler(el, mode, healthy, prometheus.NewRegistry()), newRequest(t, http.MethodGet, "/readyz"))
		checkText(t, w.Code, w.Header(), w.Body.String(), http.StatusOK, "ok\n")
	}
	el := newFakeElection(followerState())
	w := serve(NewGatedProbeHandler(el, ReadyWhenLeader, healthy, prometheus.NewRegistry()), newRequest(t, http.MethodGet, "/readyz"))
	checkText(t, w.Code, w.Header(), w.Body.String(), http.StatusServiceUnavailable, "not ready: not the leader (my-app-7d9f-xyz12 holds lease default/my-app)\n")
}
