package health

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// The supported ranges of the probe settings.
const (
	MinPeriod    = 100 * time.Millisecond
	MaxPeriod    = 5 * time.Minute
	MaxThreshold = 100
)

// Validate checks the probe settings, and with a URL the URL and the
// candidates Lease's name; each failure is its own error. The messages name
// the sidecar's flags, the one way a Config is set. The settings are
// checked without a URL too, so that a mistyped period is refused whether
// or not gating is on.
func (c Config) Validate() error {
	var errs []error
	if c.Period < MinPeriod || c.Period > MaxPeriod {
		// "5m", not time's "5m0s".
		errs = append(errs, fmt.Errorf("--app-health-period %s is outside the supported range %s..%s", c.Period, MinPeriod, strings.TrimSuffix(MaxPeriod.String(), "0s")))
	}
	for _, t := range []struct {
		name  string
		value int
	}{{"app-health-failures", c.Failures}, {"app-health-successes", c.Successes}} {
		if t.value < 1 || t.value > MaxThreshold {
			errs = append(errs, fmt.Errorf("--%s must be within 1..%d, got %d", t.name, MaxThreshold, t.value))
		}
	}
	if !c.Enabled() {
		return errors.Join(errs...)
	}
	if c.URL != "" {
		if err := checkURL(c.URL); err != nil {
			errs = append(errs, fmt.Errorf("--app-health-url %.200q: %w", c.URL, err))
		}
	}
	if c.Lease != "" {
		if msgs := validation.IsDNS1123Subdomain(c.CandidatesLease()); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--lease-name %q is too long for %s: its candidates Lease %q is not a valid name: %s", c.Lease, c.feature(), c.CandidatesLease(), msgs[0]))
		}
	}
	return errors.Join(errs...)
}

// feature names what needs the candidates Lease, for messages.
func (c Config) feature() string {
	if c.URL != "" {
		return "health gating"
	}
	return "--name-successor"
}

// checkURL accepts http:// to a loopback IP address with a port: the app
// runs in the same pod, and a probe of any other address would let whoever
// sets the flag make the sidecar send requests into the network. Host names
// are refused, "localhost" too: a name is resolved at every probe, and a
// resolver may answer with any address.
func checkURL(raw string) error {
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
