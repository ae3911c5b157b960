package options

import (
	"github.com/leader-elector/leader-elector/app"
	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/partition"
	"github.com/leader-elector/leader-elector/routing"
)

// The options are turned into each package's own configuration here, once;
// no package below reads the options themselves.

// AppConfig is the sidecar's configuration; version and revision are the
// build's (main's -ldflags).
func (o *Options) AppConfig(version, revision string) app.Config {
	qps, burst := o.clientRates()
	cfg := app.Config{
		Version:      version,
		Revision:     revision,
		LogFormat:    o.LogFormat,
		Verbosity:    o.Verbosity,
		LogNotices:   o.LogNotices,
		Client:       app.ClientConfig{Kubeconfig: o.Kubeconfig, QPS: qps, Burst: burst, LeaseFile: o.leaseFile()},
		HTTPAddress:  o.HTTPAddress,
		ProbeAddress: o.ProbeAddress,
		Readiness:    httpapi.Readiness(o.Readiness),
		Events:       o.Events,
		Election:     o.electionConfig(),
		Acquire:      o.acquireOptions(),
		Routing:      o.routingConfig(),
		Health:       o.healthConfig(),
		Notify:       o.notifyConfig(),
		Proxy:        o.Proxy.config(),
	}
	if o.Partitions > 0 {
		cfg.Partition = o.partitionConfig()
	}
	return cfg
}

// timings are the election's three durations.
func (o *Options) timings() leasetimings.Timings {
	return leasetimings.Timings{LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod}
}

// leaseSpec is the Lease this pod takes part in, the same for leader
// election and for a partition group (whose Leases are named after it).
func (o *Options) leaseSpec() election.LeaseSpec {
	return election.LeaseSpec{
		Namespace:         o.LeaseNamespace,
		Name:              o.LeaseName,
		Identity:          o.Identity,
		Timings:           o.timings(),
		ReleaseOnShutdown: o.ReleaseOnShutdown,
	}
}

// electionConfig is the part of the options the elector takes.
func (o *Options) electionConfig() election.Config {
	return election.Config{
		LeaseSpec:            o.leaseSpec(),
		Campaign:             o.campaign(),
		AdvertiseAddress:     o.Advertise.address(),
		AllowLoopbackAddress: !o.Advertise.inPod,
	}
}

// partitionConfig is the part of the options a partition group member takes.
func (o *Options) partitionConfig() partition.Config {
	return partition.Config{
		LeaseSpec:    o.leaseSpec(),
		Partitions:   o.Partitions,
		DrainTimeout: o.DrainTimeout,
	}
}

// routingConfig is the part of the options the router takes: the leader
// checks its routing once per lease duration, and retries a failed write
// within a retry period, so that routing recovers as fast as the Lease.
func (o *Options) routingConfig() routing.Config {
	return routing.Config{
		Mode:        routing.Mode(o.Routing.Mode),
		Namespace:   o.LeaseNamespace,
		PodName:     o.Identity,
		LeaseName:   o.LeaseName,
		Service:     o.Routing.Service,
		PodIP:       o.Routing.PodIP,
		LeaderLabel: o.Routing.LeaderLabel,
		Resync:      o.LeaseDuration,
		MaxBackoff:  o.RetryPeriod,
	}
}
