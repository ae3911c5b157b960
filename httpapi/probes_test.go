package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leader-elector/leader-elector/leadership"
)

// checkText checks a probe answer: status, a plain-text content type and
// exactly one line.
func checkText(t *testing.T, code int, header http.Header, body string, wantStatus int, wantBody string) {
	t.Helper()
	if code != wantStatus {
		t.Errorf("status = %d, want %d (body %q)", code, wantStatus, body)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain", ct)
	}
	if strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Errorf("body %q is not exactly one line", body)
	}
	if body != wantBody {
		t.Errorf("body = %q, want %q", body, wantBody)
	}
}

func TestReadyz(t *testing.T) {
	noHolder := followerState()
	noHolder.Holder = ""
	for _, tc := range []struct {
		name         string
		mode         Readiness
		state        leadership.State
		candidateErr error
		wantStatus   int
		wantBody     string
	}{
		{
			name:       "leader mode, leading",
			mode:       ReadyWhenLeader,
			state:      leaderState(),
			wantStatus: http.StatusOK,
			wantBody:   "ok\n",
		},
		{
			name:       "leader mode, another pod leads",
			mode:       ReadyWhenLeader,
			state:      followerState(),
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   "not ready: not the leader (my-app-7d9f-xyz12 holds lease default/my-app)\n",
		},
		{
			name:       "leader mode, no one leads",
			mode:       ReadyWhenLeader,
			state:      noHolder,
			wantStatus: http.StatusServiceUnavailable,
			wantBody:   "not ready: not the leader (no one holds lease default/my-app)\n",
		},
		{
			// The candidate check does not matter in leader mode.
			name:         "leader mode, leading, candidate check failing",
			mode:         ReadyWhenLeader,
			state:        leaderState(),
			candidateErr: errors.New("elector is not running"),
			wantStatus:   http.StatusOK,
			wantBody:     "ok\n",
		},
		{
			name:       "candidate mode, running, not leading",
			mode:       ReadyWhenCandidate,
			state:      followerState(),
			wantStatus: http.StatusOK,
			wantBody:   "ok\n",
		},
		{
			name:       "candidate mode, leading",
			mode:       ReadyWhenCandidate,
			state:      leaderState(),
			wantStatus: http.StatusOK,
			wantBody:   "ok\n",
		},
		{
			name:         "candidate mode, API server not reached",
			mode:         ReadyWhenCandidate,
			state:        leaderState(),
			candidateErr: errors.New("the API server has not answered a Lease request yet"),
			wantStatus:   http.StatusServiceUnavailable,
			wantBody:     "not ready: the API server has not answered a Lease request yet\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el := newFakeElection(tc.state)
			el.candidateErr = tc.candidateErr
			h := NewProbeHandler(el, tc.mode, prometheus.NewRegistry())
			w := serve(h, newRequest(t, http.MethodGet, "/readyz"))
			checkText(t, w.Code, w.Header(), w.Body.String(), tc.wantStatus, tc.wantBody)
		})
	}
}

func TestHealthz(t *testing.T) {
	for _, tc := range []struct {
		name       string
		healthyErr error
		wantStatus int
		wantBody   string
	}{
		{name: "healthy", wantStatus: http.StatusOK, wantBody: "ok\n"},
		{
			name:       "wedged",
			healthyErr: errors.New("failed election to renew leadership on lease my-app"),
			wantStatus: http.StatusInternalServerError,
			wantBody:   "unhealthy: failed election to renew leadership on lease my-app\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			el := newFakeElection(followerState())
			el.healthyErr = tc.healthyErr
			h := NewProbeHandler(el, ReadyWhenLeader, prometheus.NewRegistry())
			w := serve(h, newRequest(t, http.MethodGet, "/healthz"))
			checkText(t, w.Code, w.Header(), w.Body.String(), tc.wantStatus, tc.wantBody)
		})
	}
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	labelled := prometheus.WrapRegistererWith(prometheus.Labels{"lease": "my-app", "lease_namespace": "default"}, reg)
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "leader_elector_is_leader", Help: "Test gauge."})
	labelled.MustRegister(g)
	g.Set(1)

	h := NewProbeHandler(newFakeElection(followerState()), ReadyWhenLeader, reg)
	w := serve(h, newRequest(t, http.MethodGet, "/metrics"))
	if w.Code != http.StatusOK {
		t.Fatalf("status = %d, want 200", w.Code)
	}
	if ct := w.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want the Prometheus text format", ct)
	}
	want := `leader_elector_is_leader{lease="my-app",lease_namespace="default"} 1`
	if !strings.Contains(w.Body.String(), want) {
		t.Errorf("GET /metrics does not contain %q:\n%s", want, w.Body.String())
	}
}

func TestProbeRoutes(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		wantStatus     int
		wantAllow      string
	}{
		{method: http.MethodGet, target: "/leader", wantStatus: http.StatusNotFound},
		{method: http.MethodGet, target: "/", wantStatus: http.StatusNotFound},
		{method: http.MethodPost, target: "/readyz", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
		{method: http.MethodPost, target: "/healthz", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
		{method: http.MethodDelete, target: "/metrics", wantStatus: http.StatusMethodNotAllowed, wantAllow: "GET"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			h := NewProbeHandler(newFakeElection(leaderState()), ReadyWhenLeader, prometheus.NewRegistry())
			w := serve(h, newRequest(t, tc.method, tc.target))
			checkJSONError(t, w, tc.wantStatus)
			if got := w.Header().Get("Allow"); got != tc.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tc.wantAllow)
			}
		})
	}
}
