package options

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leader-elector/leader-elector/health"
)

// The supported ranges of the health gating flags.
const (
	minHealthPeriod    = 100 * time.Millisecond
	maxHealthPeriod    = 5 * time.Minute
	maxHealthThreshold = 100
)

// healthOptions configures health-gated candidacy (--app-health-url).
type healthOptions struct {
	URL                 string
	Period              time.Duration
	Failures, Successes int
}

func newHealthOptions() healthOptions {
	return healthOptions{Period: 2 * time.Second, Failures: 3, Successes: 1}
}

// addFlags registers the health gating flags on fs.
func (h *healthOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&h.URL, "app-health-url", h.URL, "Health-gated candidacy: the app's health endpoint, http://127.0.0.1:PORT/PATH (a loopback address; GET, 2xx is healthy). While the app is unhealthy this pod does not campaign and /readyz fails; a leader whose app turns unhealthy steps down when another candidate is healthy (needs the <lease-name>-candidates Lease). Empty (default): off.")
	fs.DurationVar(&h.Period, "app-health-period", h.Period, "With --app-health-url: time between probes; each probe times out after half of it.")
	fs.IntVar(&h.Failures, "app-health-failures", h.Failures, "With --app-health-url: consecutive failed probes that make the app unhealthy.")
	fs.IntVar(&h.Successes, "app-health-successes", h.Successes, "With --app-health-url: consecutive successful probes that make the app healthy (it starts unhealthy).")
}

// validate checks the health gating flags; every failure is its own error.
func (o *Options) validateHealth() []error {
	h := o.Health
	var errs []error
	if h.Period < minHealthPeriod || h.Period > maxHealthPeriod {
		errs = append(errs, fmt.Errorf("--app-health-period %s is outside the supported range %s..%s", h.Period, shortDuration(minHealthPeriod), shortDuration(maxHealthPeriod)))
	}
	for _, t := range []struct {
		name  string
		value int
	}{{"app-health-failures", h.Failures}, {"app-health-successes", h.Successes}} {
		if t.value < 1 || t.value > maxHealthThreshold {
			errs = append(errs, fmt.Errorf("--%s must be within 1..%d, got %d", t.name, maxHealthThreshold, t.value))
		}
	}
	if h.URL == "" {
		return errs
	}
	if err := validateHealthURL(h.URL); err != nil {
		errs = append(errs, fmt.Errorf("--app-health-url %q: %w", h.URL, err))
	}
	if o.Partitions > 0 {
		errs = append(errs, errors.New("--app-health-url gates one election; it cannot be combined with --partitions"))
	}
	if o.LeaseName != "" {
		if msgs := validation.IsDNS1123Subdomain(o.LeaseName + health.CandidatesLeaseSuffix); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--lease-name %q is too long for health gating: its candidates Lease %q is not a valid name: %s", o.LeaseName, o.LeaseName+health.CandidatesLeaseSuffix, msgs[0]))
		}
	}
	return errs
}

// validateHealthURL accepts http:// to a loopback IP address with a port:
// the app runs in the same pod, and a probe of any other address would let
// whoever sets the flag make the sidecar send requests into the network.
// Host names are refused, "localhost" too: a name is resolved at every
// probe, and a resolver may answer with any address.
func validateHealthURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	if u.Scheme != "http" {
		return errors.New("want http://127.0.0.1:PORT/PATH (scheme http)")
	}
	if u.User != nil {
		return errors.New("must not carry credentials")
	}
	if u.Fragment != "" {
		return errors.New("must not have a fragment")
	}
	host, port := u.Hostname(), u.Port()
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("the host must be a loopback IP address (127.0.0.1 or [::1]): the app is in the same pod")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return errors.New("needs a port within 1..65535")
	}
	return nil
}

// healthConfig is the part of the options health gating takes; empty when
// it is off.
func (o *Options) healthConfig() health.Config {
	if o.Health.URL == "" {
		return health.Config{}
	}
	return health.Config{
		URL:           o.Health.URL,
		Period:        o.Health.Period,
		Failures:      o.Health.Failures,
		Successes:     o.Health.Successes,
		Namespace:     o.LeaseNamespace,
		Lease:         o.LeaseName,
		Identity:      o.Identity,
		LeaseDuration: o.LeaseDuration,
	}
}
