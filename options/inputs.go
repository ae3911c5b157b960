package options

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The supported range of the timing flags (docs/security.md, "Inputs").
const (
	// minLeaseDuration: the Lease stores whole seconds and must outlast a
	// renew deadline of at least minRenewDeadline.
	minLeaseDuration = 2 * time.Second
	// maxTiming bounds every timing. A crashed leader is replaced only after
	// the lease duration, so a longer one is no failover at all; it also
	// keeps the Lease's int32 leaseDurationSeconds and every deadline
	// computed from the timings far from overflowing.
	maxTiming = 24 * time.Hour
	// minRenewDeadline: each Lease request may take half the renew deadline
	// (election.NewClientsets); below 500 ms one slow API server answer
	// makes the leader give up.
	minRenewDeadline = time.Second
	// minRetryPeriod: every candidate reads the Lease and the leader renews
	// it once per retry period; faster only loads the API server, and a
	// period of nanoseconds makes client-go spin.
	minRetryPeriod = 100 * time.Millisecond
	// maxDerivedQPS caps the client rate partition mode derives from
	// --partitions and --retry-period when --kube-api-qps is not given: one
	// sidecar must not be allowed to flood the API server by default.
	maxDerivedQPS = 1000
	// maxQPS and maxBurst bound an explicit --kube-api-qps and
	// --kube-api-burst: ten times the most the sidecar derives, and twice
	// that for the burst (the derived burst is twice the need). A pod that
	// needs more (1024 partitions at a 100 ms retry period want 10250
	// requests a second) would be a load one API server's default
	// --max-requests-inflight of 400 cannot carry next to the cluster's own
	// traffic, and 1e9 is a typo, not a rate.
	maxQPS   = 10 * maxDerivedQPS
	maxBurst = 2 * maxQPS
	// longValue is how much of a rejected value an error message quotes.
	longValue = 64
)

// timingRanges lists each timing with its supported range.
func (o *Options) timingRanges() []timingRange {
	return []timingRange{
		{"lease-duration", o.LeaseDuration, minLeaseDuration, maxTiming},
		{"renew-deadline", o.RenewDeadline, minRenewDeadline, maxTiming},
		{"retry-period", o.RetryPeriod, minRetryPeriod, maxTiming},
	}
}

type timingRange struct {
	name     string
	value    time.Duration
	min, max time.Duration
}

// outside: a positive value outside the range (a value that is not
// positive has its own error).
func (d timingRange) outside() bool {
	return d.value > 0 && (d.value < d.min || d.value > d.max)
}

// timingOutOfRange reports whether a timing is outside its supported range.
func (o *Options) timingOutOfRange() bool {
	return slices.ContainsFunc(o.timingRanges(), timingRange.outside)
}

// validateInputs checks the ranges the other checks of Validate do not:
// the timings' bounds, the identity, the client rate. Each failure is its
// own error.
func (o *Options) validateInputs() []error {
	var errs []error
	for _, d := range o.timingRanges() {
		if d.outside() {
			errs = append(errs, fmt.Errorf("--%s %s is outside the supported range %s..%s", d.name, shortDuration(d.value), shortDuration(d.min), shortDuration(d.max)))
		}
	}
	if strings.TrimSpace(o.Identity) != "" {
		if err := validateIdentity(o.Identity); err != nil {
			errs = append(errs, err)
		}
	}
	if math.IsNaN(float64(o.KubeAPIQPS)) || math.IsInf(float64(o.KubeAPIQPS), 0) {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be a finite number, got %v", o.KubeAPIQPS))
	} else if o.KubeAPIQPS > maxQPS {
		// A negative rate has its own error.
		errs = append(errs, fmt.Errorf("--kube-api-qps %v is outside the supported range 0..%d (0: the default)", o.KubeAPIQPS, maxQPS))
	}
	if o.KubeAPIBurst > maxBurst {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d is outside the supported range 0..%d (0: the default)", o.KubeAPIBurst, maxBurst))
	}
	if err := o.validateDerivedRate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// shortDuration prints d without the zero minutes and seconds of whole
// hours: 24h, not 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// validateIdentity requires a pod name: the identity is written to the
// Lease, to Events and, with --route=label, is the pod patched; a DNS-1123
// subdomain also cannot collide with the strings the elector reports in its
// place (election/lock.go's "(not admitted by the gate)", "... (previous
// incarnation)"), nor carry control characters into logs.
func validateIdentity(identity string) error {
	if msgs := validation.IsDNS1123Subdomain(identity); len(msgs) > 0 {
		return fmt.Errorf("--identity %s is not a valid pod name (a DNS-1123 subdomain, as $POD_NAME is): %s", quoteShort(identity), strings.Join(msgs, "; "))
	}
	return nil
}

// quoteShort quotes s for an error message, cut after longValue characters.
func quoteShort(s string) string {
	if n := utf8.RuneCountInString(s); n > longValue {
		return fmt.Sprintf("%q… (%d characters)", string([]rune(s)[:longValue]), n)
	}
	return strconv.Quote(s)
}

// partitionLeaseRate is the Lease requests per second a partition-mode pod
// that owns every partition needs: one per Lease (the partitions and its
// membership) each retry period.
func (o *Options) partitionLeaseRate() float64 {
	return float64(o.Partitions+1) / o.RetryPeriod.Seconds()
}

// validateDerivedRate refuses a partition mode whose derived client rate
// would have to exceed maxDerivedQPS; --kube-api-qps given explicitly is the
// operator's own choice.
func (o *Options) validateDerivedRate() error {
	if o.Partitions <= 0 || o.RetryPeriod <= 0 || o.KubeAPIQPS != 0 {
		return nil
	}
	need := o.partitionLeaseRate()
	if need <= maxDerivedQPS {
		return nil
	}
	shortest := time.Duration(math.Ceil(float64(o.Partitions+1)*1000/maxDerivedQPS)) * time.Millisecond
	return fmt.Errorf("--partitions=%d with --retry-period=%v needs %.0f Lease requests per second per pod, more than the derived client rate allows (at most %d); lengthen --retry-period to at least %v, or set --kube-api-qps",
		o.Partitions, o.RetryPeriod, need, maxDerivedQPS, shortest)
}

// canonicalPort is a port number in canonical decimal: strconv.Atoi alone
// takes "+80", "-0" and "0080".
var canonicalPort = regexp.MustCompile(`^(0|[1-9][0-9]{0,4})$`)

// validateAddress accepts host:port and :port, where the host is an IP
// address or "localhost" and the port a number from 0 (any free port) to
// 65535. Host names are refused rather than resolved: what the sidecar
// listens on is this pod's own address, a name could resolve elsewhere or
// differently later, and literal addresses make the overlap check exact and
// the validation independent of DNS.
func validateAddress(addr string) error {
	_, _, err := parseListenAddress(addr)
	return err
}

// parseListenAddress returns the addresses a listen address binds (nil: all
// of them) and its port.
func parseListenAddress(addr string) (hosts []netip.Addr, port int, err error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, 0, errors.New("want host:port or :port")
	}
	port, err = strconv.Atoi(portText)
	if !canonicalPort.MatchString(portText) || err != nil || port > 65535 {
		return nil, 0, fmt.Errorf("invalid port %s: want a number from 0 (any free port) to 65535", quoteShort(portText))
	}
	switch host {
	case "":
		return nil, port, nil
	case "localhost":
		// What the resolver returns for localhost; Listen binds one of them.
		return []netip.Addr{netip.IPv6Loopback(), netip.AddrFrom4([4]byte{127, 0, 0, 1})}, port, nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return nil, 0, fmt.Errorf("invalid host %s: want an IP address, \"localhost\", or none (\":port\" listens on every address); host names are not resolved", quoteShort(host))
	}
	if ip.IsMulticast() {
		return nil, 0, fmt.Errorf("invalid host %q: a multicast address cannot be listened on", host)
	}
	if ip.IsUnspecified() {
		return nil, port, nil
	}
	return []netip.Addr{ip.Unmap().WithZone("")}, port, nil
}

// overlapping reports whether two listen addresses would clash: the same
// fixed port on a common address, where a wildcard host has them all.
func overlapping(a, b string) bool {
	hostsA, portA, errA := parseListenAddress(a)
	hostsB, portB, errB := parseListenAddress(b)
	if errA != nil || errB != nil || portA != portB || portA == 0 {
		return false
	}
	if hostsA == nil || hostsB == nil {
		return true
	}
	for _, h := range hostsA {
		if slices.Contains(hostsB, h) {
			return true
		}
	}
	return false
}

// serviceLink matches the variables the kubelet sets in every container
// for each Service of its namespace (enableServiceLinks, on by default): a
// Service named leader-elector or leader-elector-* gives LEADER_ELECTOR_*
// variables that are no settings of the sidecar, and must not stop it.
var serviceLink = regexp.MustCompile(`^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// serviceLinkAddressName matches the service link variables whose value is
// an address, <proto>://<cluster IP>:<port>.
var serviceLinkAddressName = regexp.MustCompile(`^[A-Z0-9_]+_PORT(_[0-9]+_(TCP|UDP|SCTP))?$`)

// isServiceLinkAddress reports whether name=value is the kubelet's service
// link for a Service, not a setting: a Service named leader-elector-advertise
// gives every container of its namespace LEADER_ELECTOR_ADVERTISE_PORT=
// tcp://<cluster IP>:<port>, the name of --advertise-port's variable.
//
// The value, not the name, decides. Renaming the flag would only move the
// clash to whichever Service name matches the next flag, and break every
// pod spec that sets the variable. The value is unambiguous instead: no
// flag whose variable has such a name takes a URL (the flag names are
// checked by TestNoFlagVariableTakesServiceLinkValues), and an operator's
// own value in the pod spec replaces the kubelet's, so what is left in this
// shape is always the kubelet's.
func isServiceLinkAddress(name, value string) bool {
	if !serviceLinkAddressName.MatchString(name) {
		return false
	}
	proto, hostPort, ok := strings.Cut(value, "://")
	if !ok || (proto != "tcp" && proto != "udp" && proto != "sctp") {
		return false
	}
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil || !canonicalPort.MatchString(port) {
		return false
	}
	_, err = netip.ParseAddr(host)
	return err == nil
}

// envName is the variable that sets flag name.
func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// unknownEnvironment refuses every LEADER_ELECTOR_* variable that sets no
// flag: a misspelt timing left at its default is exactly what must not
// pass silently. It returns the Kubernetes service link variables apart,
// which are not refused.
func unknownEnvironment(fs *pflag.FlagSet, env Environment) (serviceLinks []string, err error) {
	if env.environ == nil {
		return nil, nil
	}
	var known []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" && f.Name != "version" {
			known = append(known, envName(f.Name))
		}
	})
	var errs []error
	for _, kv := range env.environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case !strings.HasPrefix(name, envPrefix) || slices.Contains(known, name):
		case serviceLink.MatchString(name):
			serviceLinks = append(serviceLinks, name)
		default:
			if near := nearestName(name, known); near != "" {
				errs = append(errs, fmt.Errorf("unknown environment variable %s (did you mean %s?)", name, near))
			} else {
				errs = append(errs, fmt.Errorf("unknown environment variable %s; %s<FLAG> variables set the flags (--help lists them)", name, envPrefix))
			}
		}
	}
	slices.Sort(serviceLinks)
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return serviceLinks, errors.Join(errs...)
}

// nearestName returns the known variable closest to name if it is close
// enough to be a misspelling of it, else "".
func nearestName(name string, known []string) string {
	suffixes := make([]string, len(known))
	for i, k := range known {
		suffixes[i] = strings.TrimPrefix(k, envPrefix)
	}
	if near := nearest(strings.TrimPrefix(name, envPrefix), suffixes); near != "" {
		return envPrefix + near
	}
	return ""
}

// nearest returns the known word closest to word if it is close enough to
// be a misspelling of it (at most 3 edits, and fewer than half its length),
// else "".
func nearest(word string, known []string) string {
	best, bestDistance := "", math.MaxInt
	for _, k := range known {
		if d := editDistance(word, k); d < bestDistance {
			best, bestDistance = k, d
		}
	}
	if bestDistance <= 3 && 2*bestDistance < len(word) {
		return best
	}
	return ""
}

// suggestFlag adds "did you mean" to pflag's error for an unknown long
// flag, when one of fs's flags is a likely spelling of it.
func suggestFlag(fs *pflag.FlagSet, err error) error {
	var unknown *pflag.NotExistError
	if !errors.As(err, &unknown) || !strings.HasPrefix(err.Error(), "unknown flag: --") {
		return err
	}
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Deprecated == "" && !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if near := nearest(unknown.GetSpecifiedName(), names); near != "" {
		return fmt.Errorf("%w (did you mean --%s?)", err, near)
	}
	return err
}

// editDistance is the Levenshtein distance of a and b, in bytes (the names
// are ASCII). Hand-written: twenty lines do not warrant a dependency.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
