package app

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/filelease"
	"github.com/leader-elector/leader-elector/leaseevents"
	"github.com/leader-elector/leader-elector/serverclock"
)

// ClientConfig is how to reach the API server.
type ClientConfig struct {
	// Kubeconfig is a kubeconfig file; empty: the in-cluster configuration.
	Kubeconfig string
	// QPS and Burst replace client-go's default rate limits when not zero.
	QPS   float32
	Burst int
	// LeaseFile, when set, is the local lease store (--lease-store=file:):
	// the Lease API is served in-process from this file (package filelease)
	// instead of the API server.
	LeaseFile string
}

// clients are every API client of the sidecar, built in this one place.
// Each has its own rate limiter, so that Events and routing writes can
// never hold up a renewal of the Lease.
type clients struct {
	// requests and watches are the Lease's (election.NewClientsets); they
	// record the API server's clock into serverClock.
	requests, watches kubernetes.Interface
	serverClock       *serverclock.Clock
	// events records the Lease's Events; nil when they are off.
	events *leaseevents.Recorder
	// routing sends the routing writes and the startup checks.
	routing kubernetes.Interface
	// close stops the local lease store, if any, once the Lease is released.
	close func()
}

// newClients builds the clients cfg needs.
func newClients(ctx context.Context, cfg Config) (*clients, error) {
	c := &clients{serverClock: serverclock.New(nil), close: func() {}}
	restConfig, err := c.restConfig(ctx, cfg.Client)
	if err != nil {
		return nil, err
	}
	renewDeadline := cfg.Election.RenewDeadline
	if c.requests, c.watches, err = election.NewClientsets(restConfig, renewDeadline, c.serverClock); err != nil {
		return nil, err
	}
	if cfg.Events && !cfg.partitionMode() && cfg.Client.LeaseFile == "" {
		events, err := sideClient(restConfig, "leader-elector-events", 0)
		if err != nil {
			return nil, err
		}
		c.events = leaseevents.New(ctx, events, cfg.Election.Identity)
	}
	// Like the Lease client, a request timeout of half the renew deadline,
	// which the API server also applies to the request.
	if c.routing, err = sideClient(restConfig, "leader-elector-routing", renewDeadline/2); err != nil {
		return nil, err
	}
	return c, nil
}

// flushEvents waits, boundedly, for the last Events to be written.
func (c *clients) flushEvents(ctx context.Context) {
	if c.events == nil {
		return
	}
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eventsFlushTimeout)
	defer cancel()
	if err := c.events.Close(flushCtx); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to record the last Events")
	}
}

// restConfig starts the local lease store and reaches it, or is the API
// server's configuration.
func (c *clients) restConfig(ctx context.Context, cc ClientConfig) (*rest.Config, error) {
	if cc.LeaseFile == "" {
		return restConfig(cc)
	}
	cfg, stop, err := filelease.Start(ctx, cc.LeaseFile)
	if err != nil {
		return nil, err
	}
	c.close = stop
	return cfg, nil
}

// restConfig loads the kubeconfig given, or the in-cluster configuration.
func restConfig(cc ClientConfig) (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	if cc.Kubeconfig != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", cc.Kubeconfig)
	} else {
		cfg, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("no usable client configuration (set --kubeconfig outside a pod): %w", err)
	}
	if cc.QPS > 0 {
		cfg.QPS = cc.QPS
	}
	if cc.Burst > 0 {
		cfg.Burst = cc.Burst
	}
	return cfg, nil
}

// sideClient builds a client of its own, with its own rate limits, for
// requests that must never hold up a renewal of the Lease.
func sideClient(cfg *rest.Config, userAgent string, timeout time.Duration) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	rest.AddUserAgent(c, userAgent)
	c.Timeout = timeout
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("build %s client: %w", userAgent, err)
	}
	return cs, nil
}
