package app

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/httpapi"
)

// servers are the application API (localhost by default) and the probe
// server (/readyz, /healthz, /metrics).
type servers struct {
	api, probes *httpapi.Server
}

// listen opens both listeners, so that an address in use fails the start
// before anything else runs.
func listen(ctx context.Context, cfg Config, w *workload, m *metrics) (*servers, error) {
	api, err := httpapi.Listen(ctx, cfg.HTTPAddress, w.api)
	if err != nil {
		return nil, fmt.Errorf("application API: %w", err)
	}
	probes, err := httpapi.ListenProbes(ctx, cfg.ProbeAddress, w.probes(m.registry), m.own)
	if err != nil {
		_ = api.Shutdown(context.Background())
		return nil, fmt.Errorf("probe server: %w", err)
	}
	return &servers{api: api, probes: probes}, nil
}

// serve serves both in the background; the first that fails calls stop.
func (s *servers) serve(stop context.CancelCauseFunc) {
	for name, srv := range map[string]*httpapi.Server{"application API": s.api, "probe server": s.probes} {
		go func() {
			if err := srv.Serve(); err != nil {
				stop(fmt.Errorf("%s: %w", name, err))
			}
		}()
	}
}

// shutdown stops both gracefully, within shutdownTimeout.
func (s *servers) shutdown(ctx context.Context) {
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, srv := range []*httpapi.Server{s.api, s.probes} {
		if err := srv.Shutdown(shutdownCtx); err != nil {
			klog.FromContext(ctx).Error(err, "Failed to shut down an HTTP server gracefully")
		}
	}
}
