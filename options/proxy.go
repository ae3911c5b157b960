package options

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/proxy"
)

// Defaults of the proxy flags.
const (
	defaultProxyPeerAddress   = ":4041"
	defaultProxyMaxConnection = 1024
	// defaultProxyShutdownDelay covers kube-proxy's reprogramming of the
	// nodes after a pod's deletion (0.1–2 s measured on a real node), with
	// room for a busier cluster.
	defaultProxyShutdownDelay = 5 * time.Second
)

// proxyOptions configure the forwarding proxy (--proxy-address).
type proxyOptions struct {
	Address        string
	PeerAddress    string
	Upstream       string
	Wait           time.Duration
	Drain          time.Duration
	ShutdownDelay  time.Duration
	MaxConnections int
	// waitGiven: --proxy-wait was given; otherwise it is the renew
	// deadline.
	waitGiven bool
}

func newProxyOptions() proxyOptions {
	return proxyOptions{PeerAddress: defaultProxyPeerAddress, MaxConnections: defaultProxyMaxConnection, ShutdownDelay: defaultProxyShutdownDelay}
}

// addFlags registers the proxy flags on fs.
func (p *proxyOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&p.Address, "proxy-address", p.Address, "Listen here (e.g. :7000, the pod IP) for TCP clients and forward each to the leader's app: this pod's --proxy-upstream while it leads, else the leader's proxy (empty, the default: no proxy; leader election only).")
	fs.StringVar(&p.PeerAddress, "proxy-peer-address", p.PeerAddress, "With --proxy-address: where followers' proxies connect; it accepts only while this pod leads and forwards only to --proxy-upstream. Its port must be the same on every pod (followers dial <leader's pod IP>:<port>).")
	fs.StringVar(&p.Upstream, "proxy-upstream", p.Upstream, "With --proxy-address: the app's loopback host:port (e.g. 127.0.0.1:5432).")
	fs.DurationVar(&p.Wait, "proxy-wait", p.Wait, fmt.Sprintf("With --proxy-address: how long a new connection waits for a leader that can be reached before it is closed (1ms..%v; default: --renew-deadline).", proxy.MaxWait))
	fs.DurationVar(&p.Drain, "proxy-drain", p.Drain, fmt.Sprintf("With --proxy-address: on a graceful release (POST /release, a health step-down, a handover), how long this pod, still leading, waits for the connections forwarded to its app to end before it releases the Lease; new connections wait for the next leader meanwhile, and those still open are closed when the term ends (0s..%v, shorter than --proxy-wait; 0: closed at once).", proxy.MaxDrain))
	fs.DurationVar(&p.ShutdownDelay, "proxy-shutdown-delay", p.ShutdownDelay, fmt.Sprintf("With --proxy-address: how long the proxy keeps forwarding to the new leader after this pod has left the election at shutdown, while the Service still sends clients here (0s..%v; keep it within the pod's termination grace period).", proxy.MaxShutdownDelay))
	fs.IntVar(&p.MaxConnections, "proxy-max-connections", p.MaxConnections, fmt.Sprintf("With --proxy-address: the most connections open at once on each of the proxy's two ports; more are closed at once (1..%d).", proxy.MaxConnectionsLimit))
}

// complete takes the wait from the renew deadline unless it was given.
func (p *proxyOptions) complete(fs *pflag.FlagSet, renewDeadline time.Duration) {
	p.waitGiven = fs.Changed("proxy-wait")
	if !p.waitGiven {
		p.Wait = renewDeadline
	}
}

// validate checks the proxy flags against the other listeners; partitions
// is --partitions, which has no one leader to forward to.
func (p *proxyOptions) validate(httpAddress, probeAddress string, partitions int) []error {
	if p.Address == "" {
		if p.Upstream != "" {
			return []error{errors.New("--proxy-upstream needs --proxy-address (where the proxy listens)")}
		}
		return nil
	}
	var errs []error
	if partitions > 0 {
		errs = append(errs, errors.New("--proxy-address forwards to the one leader; it cannot be combined with --partitions"))
	}
	if p.Upstream == "" {
		errs = append(errs, errors.New("--proxy-address needs --proxy-upstream (the app's loopback host:port)"))
	} else if err := proxy.CheckUpstream(p.Upstream); err != nil {
		errs = append(errs, fmt.Errorf("--proxy-upstream: %w", err))
	}
	errs = append(errs, p.validateListeners(httpAddress, probeAddress)...)
	if p.Wait < time.Millisecond || p.Wait > proxy.MaxWait {
		errs = append(errs, fmt.Errorf("--proxy-wait %s is outside the supported range 1ms..%s", shortDuration(p.Wait), shortDuration(proxy.MaxWait)))
	}
	if p.Drain < 0 || p.Drain > proxy.MaxDrain {
		errs = append(errs, fmt.Errorf("--proxy-drain %s is outside the supported range 0s..%s", shortDuration(p.Drain), shortDuration(proxy.MaxDrain)))
	} else if p.Drain > 0 && p.Drain >= p.Wait {
		wait := "--proxy-wait " + shortDuration(p.Wait)
		if !p.waitGiven {
			wait = fmt.Sprintf("--proxy-wait (by default --renew-deadline, %s)", shortDuration(p.Wait))
		}
		errs = append(errs, fmt.Errorf("--proxy-drain %s must be shorter than %s: connections that arrive during a drain wait for the next leader", shortDuration(p.Drain), wait))
	}
	if p.ShutdownDelay < 0 || p.ShutdownDelay > proxy.MaxShutdownDelay {
		errs = append(errs, fmt.Errorf("--proxy-shutdown-delay %s is outside the supported range 0s..%s", shortDuration(p.ShutdownDelay), shortDuration(proxy.MaxShutdownDelay)))
	}
	if p.MaxConnections < 1 || p.MaxConnections > proxy.MaxConnectionsLimit {
		errs = append(errs, fmt.Errorf("--proxy-max-connections must be within 1..%d, got %d", proxy.MaxConnectionsLimit, p.MaxConnections))
	}
	return errs
}

// validateListeners checks both proxy addresses, and that no two of the
// four listeners share a port.
func (p *proxyOptions) validateListeners(httpAddress, probeAddress string) []error {
	var errs []error
	listeners := []struct{ name, value string }{
		{"proxy-address", p.Address}, {"proxy-peer-address", p.PeerAddress},
		{"http-address", httpAddress}, {"probe-address", probeAddress},
	}
	for _, a := range listeners[:2] {
		if err := validateAddress(a.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", a.name, a.value, err))
		}
	}
	if _, port, err := parseListenAddress(p.PeerAddress); err == nil && port == 0 {
		errs = append(errs, fmt.Errorf("--proxy-peer-address %q needs a port (followers dial it on the leader's pod)", p.PeerAddress))
	}
	for i, a := range listeners[:2] {
		for _, b := range listeners[i+1:] {
			if overlapping(a.value, b.value) {
				errs = append(errs, fmt.Errorf("--%s %q and --%s %q would listen on the same port; each needs its own listener", a.name, a.value, b.name, b.value))
			}
		}
	}
	return errs
}

// config is the proxy's configuration, without its clients; nil when off.
func (p *proxyOptions) config() *proxy.Config {
	if p.Address == "" {
		return nil
	}
	return &proxy.Config{
		Address:        p.Address,
		PeerAddress:    p.PeerAddress,
		Upstream:       p.Upstream,
		Wait:           p.Wait,
		Drain:          p.Drain,
		ShutdownDelay:  p.ShutdownDelay,
		MaxConnections: p.MaxConnections,
	}
}
