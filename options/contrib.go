package options

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/leasetimings"
)

// The retired k8s.gcr.io/leader-elector image (kubernetes/contrib, election/)
// is replaced without touching the charts that embed it: its four naming
// flags are aliases (deprecatedAliases), --ttl sets the lease duration and
// derives the other two timings, and --use-cluster-credentials is accepted
// and ignored. docs/migration.md is the user's side of this file.

// The ratios --ttl derives the renew deadline and the retry period in: those
// of the defaults (15s, 10s, 2s), so that a --ttl behaves as a scaled
// default. The retired image used ttl/2 and ttl/4; the defaults' ratios keep
// the leader's claim (the renew deadline) further inside the lease and give
// it five renewal attempts per deadline instead of two.
const (
	ttlRenewNum, ttlRenewDen = 10, 15
	ttlRetryNum, ttlRetryDen = 2, 15
)

// applyContrib runs after the aliases are resolved: --ttl (already copied
// into --lease-duration, or equal to it) derives the renew deadline and the
// retry period that were not given, on the command line or in the
// environment; a given one wins, and the usual timing checks then judge the
// three together. --use-cluster-credentials is only noted.
func (o *Options) applyContrib(fs *pflag.FlagSet) error {
	if fs.Changed("use-cluster-credentials") {
		o.noOps = append(o.noOps, "use-cluster-credentials")
	}
	if !slices.Contains(o.deprecated, "ttl") {
		return nil
	}
	// The --ttl is checked here, by its own name: the old image took any
	// duration, and an error about --lease-duration would name a flag the
	// chart does not pass.
	if o.ttl%time.Second != 0 || o.ttl < minLeaseDuration || o.ttl > maxTiming {
		return fmt.Errorf("--ttl %v is not supported: want whole seconds from %s to %s (it sets --lease-duration; the Lease stores seconds)", o.ttl, shortDuration(minLeaseDuration), shortDuration(maxTiming))
	}
	renew, retry := ttlTimings(o.ttl)
	if !fs.Changed("renew-deadline") {
		o.RenewDeadline = renew
		o.ttlDerived = append(o.ttlDerived, "renew-deadline")
	}
	if !fs.Changed("retry-period") {
		o.RetryPeriod = retry
		o.ttlDerived = append(o.ttlDerived, "retry-period")
	}
	return nil
}

// ttlTimings derives the renew deadline and the retry period from a ttl in
// the defaults' ratios, cut to whole milliseconds for readable logs; the
// renew deadline leaves at least leasetimings.MinMargin below the ttl (which
// only a --ttl of 2s makes shorter than the ratio: 1s, not 1.333s). Every
// ttl from 2s to 24h gives timings inside the supported ranges that pass
// leasetimings.Timings.Check (options/contrib_test.go proves it at the bounds).
func ttlTimings(ttl time.Duration) (renew, retry time.Duration) {
	retry = (ttl * ttlRetryNum / ttlRetryDen).Truncate(time.Millisecond)
	renew = min(ttl*ttlRenewNum/ttlRenewDen, ttl-leasetimings.MinMargin(ttl, retry)).Truncate(time.Millisecond)
	return renew, retry
}

// logTTL says what --ttl was mapped to.
func (o *Options) logTTL(logger klog.Logger) {
	derived := make([]string, 0, len(o.ttlDerived))
	for _, name := range o.ttlDerived {
		derived = append(derived, "--"+name)
	}
	logger.Info("Flag is deprecated", "flag", "--ttl", "use", "--lease-duration",
		"leaseDuration", o.LeaseDuration, "renewDeadline", o.RenewDeadline, "retryPeriod", o.RetryPeriod, "derivedFromTTL", derived)
}

// logContrib logs the retired image's no-op flags and an application API
// that listens beyond loopback.
func (o *Options) logContrib(logger klog.Logger) {
	for _, name := range o.noOps {
		credentials := "in-cluster (the pod's service account)"
		if o.Kubeconfig != "" {
			credentials = "the kubeconfig " + o.Kubeconfig
		}
		logger.Info("Flag is deprecated and has no effect", "flag", "--"+name, "credentials", credentials)
	}
	if o.apiExposed() {
		logger.Info("Warning: the application API listens on a non-loopback address; anyone who reaches it can make the leader step down (POST /release). Bind 127.0.0.1 unless something outside the pod must ask it",
			"httpAddress", o.HTTPAddress)
	}
}

// apiExposed reports whether --http-address binds more than loopback: a
// wildcard host (":4040", "0.0.0.0:4040") or any address that is not a
// loopback one. The old image was often run with --http=0.0.0.0:4040 so
// that the kubelet could probe "/".
func (o *Options) apiExposed() bool {
	hosts, _, err := parseListenAddress(o.HTTPAddress)
	if err != nil {
		return false
	}
	if hosts == nil {
		return true
	}
	for _, h := range hosts {
		if !h.IsLoopback() {
			return true
		}
	}
	return false
}
