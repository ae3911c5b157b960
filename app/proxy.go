package app

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/proxy"
)

// listenProxy opens the forwarding proxy's listeners, if it is on: it
// follows the elector, and reads the leader's pod with the routing client
// (its own rate limits, never the Lease's).
func listenProxy(cfg Config, w *workload, c *clients) (*proxy.Proxy, error) {
	if cfg.Proxy == nil {
		return nil, nil
	}
	if w.elector == nil {
		// Options refuse it: a partition group has no one leader.
		return nil, errors.New("the proxy is for leader election, not partition mode")
	}
	pcfg := *cfg.Proxy
	pcfg.Leadership = w.elector
	pcfg.Resolver = &proxy.PodAddresses{
		Pods: c.routing.CoreV1().Pods(cfg.Election.Namespace),
		Self: cfg.Election.Identity,
	}
	p, err := proxy.Listen(pcfg)
	if err != nil {
		return nil, err
	}
	// A graceful release lets the requests in flight to this pod's app end
	// within its term (--proxy-drain).
	w.elector.SetBeforeRelease(p.Quiesce)
	return p, nil
}

// proxyDrain is the proxy's drain, which a graceful release waits for
// first; 0 without the proxy.
func proxyDrain(cfg Config) time.Duration {
	if cfg.Proxy == nil {
		return 0
	}
	return cfg.Proxy.Drain
}

// lingerProxy keeps the proxy forwarding to the new leader for its
// shutdown delay after this pod has left the election: the Service still
// sends clients here until kube-proxy has reprogrammed the nodes after the
// pod's deletion, which takes its own time (up to seconds); a proxy that
// stopped at once would refuse them. The pod is not Ready meanwhile: its
// elector no longer runs.
func lingerProxy(ctx context.Context, cfg *proxy.Config, p *proxy.Proxy, w *workload) {
	if p == nil || cfg.ShutdownDelay <= 0 || w.elector == nil {
		return
	}
	klog.FromContext(ctx).Info("Proxy forwards to the new leader for the shutdown delay", "delay", cfg.ShutdownDelay)
	followCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownDelay)
	defer cancel()
	w.elector.Follow(followCtx)
	<-followCtx.Done()
}

// startProxy serves the proxy, if any, until the function returned is
// called; that closes every connection and waits for them. It runs on a
// context of its own: on shutdown it must see this pod stop leading (and
// close its app's connections then), which comes after ctx ends.
func startProxy(ctx context.Context, p *proxy.Proxy) (stop func()) {
	if p == nil {
		return func() {}
	}
	proxyCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(proxyCtx)
	}()
	return func() {
		cancel()
		<-done
	}
}
