package httpapi

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness selects what /readyz reports.
type Readiness string

const (
	// ReadyWhenLeader: ready only while this pod leads, so a Service sends
	// traffic to the leader alone.
	ReadyWhenLeader Readiness = "leader"
	// ReadyWhenCandidate: ready once the elector runs and has reached the API
	// server.
	ReadyWhenCandidate Readiness = "candidate"
)

// NewProbeHandler returns the handler of the probe server: /readyz, /healthz
// and /metrics from gatherer.
func NewProbeHandler(el Election, mode Readiness, gatherer prometheus.Gatherer) http.Handler {
	return NewGatedProbeHandler(el, mode, nil, gatherer)
}

// NewGatedProbeHandler is NewProbeHandler with one more condition of
// readiness, checked first in every mode: health gating's (the app is
// healthy). Nil is none.
func NewGatedProbeHandler(el Election, mode Readiness, gate func() error, gatherer prometheus.Gatherer) http.Handler {
	p := &probes{el: el, mode: mode, gate: gate}
	return newProbeRoutes(p.notReady, el.Healthy, gatherer)
}

// newProbeRoutes serves /readyz from ready, /healthz from healthy and
// /metrics from gatherer.
func newProbeRoutes(ready, healthy func() error, gatherer prometheus.Gatherer) http.Handler {
	metrics := promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{})
	return routes{
		"/readyz":  {http.MethodGet: func(w http.ResponseWriter, _ *http.Request) { readyz(w, ready) }},
		"/healthz": {http.MethodGet: func(w http.ResponseWriter, _ *http.Request) { healthz(w, healthy) }},
		"/metrics": {http.MethodGet: metrics.ServeHTTP},
	}
}

type probes struct {
	el   Election
	mode Readiness
	gate func() error
}

func readyz(w http.ResponseWriter, ready func() error) {
	if err := ready(); err != nil {
		writeText(w, http.StatusServiceUnavailable, "not ready: "+err.Error())
		return
	}
	writeText(w, http.StatusOK, "ok")
}

func (p *probes) notReady() error {
	if p.gate != nil {
		if err := p.gate(); err != nil {
			return err
		}
	}
	if p.mode == ReadyWhenCandidate {
		return p.el.Candidate()
	}
	s := p.el.Snapshot()
	if s.IsLeader {
		return nil
	}
	if s.Holder == "" {
		return fmt.Errorf("not the leader (no one holds lease %s/%s)", s.Namespace, s.Name)
	}
	return fmt.Errorf("not the leader (%s holds lease %s/%s)", s.Holder, s.Namespace, s.Name)
}

func healthz(w http.ResponseWriter, healthy func() error) {
	if err := healthy(); err != nil {
		writeText(w, http.StatusInternalServerError, "unhealthy: "+err.Error())
		return
	}
	writeText(w, http.StatusOK, "ok")
}

func writeText(w http.ResponseWriter, status int, line string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	fmt.Fprintln(w, line)
}
