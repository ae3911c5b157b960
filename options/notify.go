package options

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/notify"
)

// The supported range of the change notification flags.
const (
	// minNotifyTimeout: below it a loaded node makes every attempt fail.
	minNotifyTimeout = 100 * time.Millisecond
	// maxNotifyTimeout: an app that needs longer to take a notification
	// holds back all the later ones; it should poll or stream instead.
	maxNotifyTimeout = 30 * time.Second
	// maxNotifyRetries: the retries of one change delay the next; ten with
	// the backoff's cap of 2s already hold it back by about half a minute.
	maxNotifyRetries = 10
)

// notifyOptions configure the change notifications (--on-change-url).
type notifyOptions struct {
	URL     string
	Timeout time.Duration
	Retries int
}

func newNotifyOptions() notifyOptions {
	return notifyOptions{Timeout: notify.DefaultTimeout, Retries: notify.DefaultRetries}
}

// addFlags registers the notification flags on fs.
func (n *notifyOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&n.URL, "on-change-url", n.URL, "POST the GET /leader JSON (with --partitions, the GET /partitions JSON) to this URL of the app at every change, in order (http:// to 127.0.0.1, [::1] or localhost with a port; empty: off).")
	fs.DurationVar(&n.Timeout, "on-change-timeout", n.Timeout, fmt.Sprintf("How long each --on-change-url attempt may take (%s..%s).", shortDuration(minNotifyTimeout), shortDuration(maxNotifyTimeout)))
	fs.IntVar(&n.Retries, "on-change-retries", n.Retries, fmt.Sprintf("How often a failed --on-change-url notification is retried before the next change is sent (0..%d).", maxNotifyRetries))
}

// validate checks the notification flags.
func (n *notifyOptions) validate() []error {
	var errs []error
	if n.Timeout < minNotifyTimeout || n.Timeout > maxNotifyTimeout {
		errs = append(errs, fmt.Errorf("--on-change-timeout %s is outside the supported range %s..%s", shortDuration(n.Timeout), shortDuration(minNotifyTimeout), shortDuration(maxNotifyTimeout)))
	}
	if n.Retries < 0 || n.Retries > maxNotifyRetries {
		errs = append(errs, fmt.Errorf("--on-change-retries must be within 0..%d, got %d", maxNotifyRetries, n.Retries))
	}
	if n.URL == "" {
		return errs
	}
	if err := validateNotifyURL(n.URL); err != nil {
		errs = append(errs, fmt.Errorf("--on-change-url %s: %w", quoteShort(n.URL), err))
	}
	return errs
}

// validateNotifyURL accepts http:// URLs to a loopback host with an
// explicit port: the app runs in the same pod, and a sidecar that can be
// told to POST anywhere else is a request-forgery gadget (with the pod's
// network identity). https is refused too: nothing leaves the pod, so there
// is nothing to encrypt, and certificates for 127.0.0.1 only add failure.
func validateNotifyURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" {
		return fmt.Errorf("want http://127.0.0.1:PORT/PATH (the app in the same pod), got scheme %q", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return fmt.Errorf("want http://127.0.0.1:PORT/PATH, with a host")
	}
	if u.User != nil {
		return fmt.Errorf("must not carry credentials")
	}
	if u.Fragment != "" || u.RawFragment != "" {
		return fmt.Errorf("must not have a fragment")
	}
	host, port := u.Hostname(), u.Port()
	if host != "localhost" {
		ip, err := netip.ParseAddr(host)
		// An IPv4-mapped address is refused as --pod-ip's is: write the
		// IPv4 address.
		if err != nil || !ip.IsLoopback() || ip.Is4In6() || ip.Zone() != "" {
			return fmt.Errorf("host %s is not a loopback address; only 127.0.0.1, [::1] or localhost (the app in the same pod) is allowed", quoteShort(host))
		}
	}
	n, err := strconv.Atoi(port)
	if port == "" || err != nil || !canonicalPort.MatchString(port) || n < 1 || n > 65535 {
		return fmt.Errorf("needs an explicit port from 1 to 65535, got %s", quoteShort(port))
	}
	return nil
}

// notifyConfig is the part of the options the notifier takes.
func (o *Options) notifyConfig() notify.Options {
	return notify.Options{URL: o.Notify.URL, Timeout: o.Notify.Timeout, Retries: o.Notify.Retries}
}
