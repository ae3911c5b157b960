package app

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/proxy"
)

// servers are the application API (localhost by default), the probe
// server (/readyz, /healthz and /metrics) and, if on, the forwarding proxy.
type servers struct {
	api, probes *httpapi.Server
	proxy       *proxy.Proxy
}

// listen opens every listener, so that an address in use fails the start
// before anything else runs.
func listen(ctx context.Context, cfg Config, w *workload, c *clients, m *metrics) (*servers, error) {
	api, err := httpapi.Listen(ctx, cfg.HTTPAddress, w.api)
	if err != nil {
		return nil, fmt.Errorf("application API: %w", err)
	}
	probes, err := httpapi.ListenProbes(ctx, cfg.ProbeAddress, w.probes(m.registry), m.own)
	if err != nil {
		_ = api.Shutdown(context.Background())
		return nil, fmt.Errorf("probe server: %w", err)
	}
	s := &servers{api: api, probes: probes}
	if s.proxy, err = listenProxy(cfg, w, c); err == nil && s.proxy != nil {
		err = m.registerOwn(s.proxy.Collectors())
	}
	if err != nil {
		_ = api.Shutdown(context.Background())
		_ = probes.Shutdown(context.Background())
		return nil, fmt.Errorf("proxy: %w", err)
	}
	return s, nil
}

// proxyAddr and proxyPeerAddr are the proxy's addresses, "" when it is off.
func (s *servers) proxyAddr() string {
	if s.proxy == nil {
		return ""
	}
	return s.proxy.Addr().String()
}

func (s *servers) proxyPeerAddr() string {
	if s.proxy == nil {
		return ""
	}
	return s.proxy.PeerAddr().String()
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
