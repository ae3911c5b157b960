package routing

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// mode is what one routing mode needs and how it is carried out: the one
// table of modes, which Validate, New and the unknown-mode message read, so
// that a new mode is one entry here and a publisher.
type mode struct {
	// validate returns one error per missing or invalid field.
	validate func(Config) []error
	// publisher carries the mode out; nil for ModeNone.
	publisher func(Config, fence, *Metrics) publisher
}

var modes = map[Mode]mode{
	ModeNone: {validate: func(Config) []error { return nil }},
	ModeEndpointSlice: {
		validate: validateEndpointSlice,
		publisher: func(cfg Config, f fence, m *Metrics) publisher {
			return &sliceWriter{cfg: cfg, fence: f, metrics: m}
		},
	},
	ModeLabel: {
		validate: validateLabel,
		publisher: func(cfg Config, f fence, m *Metrics) publisher {
			return &labelWriter{cfg: cfg, fence: f, metrics: m}
		},
	},
}

// Validate checks that the mode is known and has what it needs; each
// failure is its own error. The messages name the sidecar's flags, the one
// way a Config is set. An empty mode is ModeNone.
func (c Config) Validate() error {
	m, ok := modes[c.mode()]
	if !ok {
		known := make([]string, 0, len(modes))
		for name := range modes {
			known = append(known, fmt.Sprintf("%q", name))
		}
		slices.Sort(known)
		return fmt.Errorf("--route %q is unknown (want %s)", c.Mode, strings.Join(known, ", "))
	}
	return errors.Join(m.validate(c)...)
}

// mode is c.Mode, with the empty mode as ModeNone.
func (c Config) mode() Mode {
	if c.Mode == "" {
		return ModeNone
	}
	return c.Mode
}

func validateEndpointSlice(c Config) []error {
	var errs []error
	switch {
	case c.Service == "":
		errs = append(errs, errors.New("--route=endpointslice needs --service (a Service without a selector)"))
	default:
		if msgs := validation.IsDNS1035Label(c.Service); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--service %.64q is not a valid Service name: %s", c.Service, strings.Join(msgs, "; ")))
		}
	}
	switch {
	case c.PodIP == "":
		errs = append(errs, errors.New("--route=endpointslice needs --pod-ip or $POD_IP (the downward API's status.podIP)"))
	default:
		if err := checkPodIP(c.PodIP); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// validateLabel checks the leader label key and that the Lease's name,
// which labels each pod of the group, is a label value.
func validateLabel(c Config) []error {
	var errs []error
	if msgs := validation.IsQualifiedName(c.LeaderLabel); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--leader-label %.64q is not a valid label key: %s", c.LeaderLabel, strings.Join(msgs, "; ")))
	}
	if c.LeaderLabel == GroupLabel {
		errs = append(errs, fmt.Errorf("--leader-label must not be %s, which names the pods' Lease", GroupLabel))
	}
	if why := ReservedLabel(c.LeaderLabel); why != "" {
		errs = append(errs, fmt.Errorf("--leader-label %q is reserved: %s (label mode rewrites it on every pod, which can take the pods from their controller); choose a key under your own prefix", c.LeaderLabel, why))
	}
	if msgs := validation.IsValidLabelValue(c.LeaseName); c.LeaseName != "" && len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--route=label labels pods with the Lease's name, and %.64q is not a valid label value: %s", c.LeaseName, strings.Join(msgs, "; ")))
	}
	return errs
}

// checkPodIP requires the address other pods reach this one at: an IP in
// Kubernetes' strict form (no leading zeros, no IPv4-mapped IPv6, no zone)
// that is unicast and routable. apimachinery has the format check; the
// refusal of special addresses, which the EndpointSlice API applies too,
// lives in k8s.io/kubernetes (not importable), hence netip here.
func checkPodIP(ip string) error {
	if errs := validation.IsValidIP(field.NewPath("pod-ip"), ip); len(errs) > 0 {
		details := make([]string, 0, len(errs))
		for _, e := range errs {
			details = append(details, e.Detail)
		}
		return fmt.Errorf("--pod-ip %.64q is not an IP address: %s", ip, strings.Join(details, "; "))
	}
	addr, err := netip.ParseAddr(ip)
	if err != nil {
		return fmt.Errorf("--pod-ip %.64q is not an IP address: %w", ip, err)
	}
	var why string
	switch {
	case addr.IsUnspecified():
		why = "it is the unspecified address"
	case addr.IsLoopback():
		why = "it is a loopback address"
	case addr.IsMulticast():
		why = "it is a multicast address"
	case addr.IsLinkLocalUnicast():
		why = "it is a link-local address"
	case addr == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		why = "it is the broadcast address"
	default:
		return nil
	}
	return fmt.Errorf("--pod-ip %q is not a routable unicast address: %s (want the pod's IP, status.podIP)", ip, why)
}
