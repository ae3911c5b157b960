package options

import (
	"errors"
	"fmt"

	"github.com/leader-elector/leader-elector/partition"
	"github.com/leader-elector/leader-elector/routing"
)

// validatePartitions checks --partitions and what partition mode asks of
// the other options.
func (o *Options) validatePartitions() []error {
	var errs []error
	if o.Partitions < 0 || o.Partitions > partition.MaxPartitions {
		errs = append(errs, fmt.Errorf("--partitions must be within 0..%d (0: leader election), got %d", partition.MaxPartitions, o.Partitions))
	}
	if o.Partitions > 0 && o.Routing.Mode != string(routing.ModeNone) {
		errs = append(errs, fmt.Errorf("--route=%s publishes one leader; it cannot be combined with --partitions", o.Routing.Mode))
	}
	if o.DrainTimeout < 0 || o.DrainTimeout > partition.MaxDrainTimeout {
		errs = append(errs, fmt.Errorf("--drain-timeout must be within 0s..%v (0: hand partitions over at once), got %v", partition.MaxDrainTimeout, o.DrainTimeout))
	}
	if o.Partitions == 0 && o.drainTimeoutGiven {
		errs = append(errs, errors.New("--drain-timeout is for partition mode; give --partitions too"))
	}
	if o.Partitions > 0 && len(o.LeaseName) > partition.MaxGroupNameLength {
		errs = append(errs, fmt.Errorf("--lease-name %q is longer than %d characters, the most partition mode allows (it is a label value)", o.LeaseName, partition.MaxGroupNameLength))
	}
	return errs
}

// clientRates returns the client rate limits: the flags when given; in
// partition mode otherwise enough for one pod to renew every partition each
// retry period twice over (client-go's default of 5 per second would make a
// pod that owns many partitions miss its renewals), at most maxDerivedQPS
// (Validate refuses a configuration that needs more than that).
func (o *Options) clientRates() (qps float32, burst int) {
	qps, burst = o.KubeAPIQPS, o.KubeAPIBurst
	if o.Partitions == 0 {
		return qps, burst
	}
	leases := o.Partitions + 1
	if qps == 0 {
		qps = float32(min(maxDerivedQPS, max(5, 2*o.partitionLeaseRate())))
	}
	if burst == 0 {
		burst = max(10, 2*leases)
	}
	return qps, burst
}
