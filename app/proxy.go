package app

import (
	"context"
	"errors"

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
	return proxy.Listen(pcfg)
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
