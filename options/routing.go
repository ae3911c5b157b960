package options

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/leader-elector/leader-elector/routing"
)

// routeOptions configures how traffic is routed to the leader (--route).
// Routing objects live in the Lease's namespace, which is the pod's own by
// default.
type routeOptions struct {
	Mode        string
	Service     string
	PodIP       string
	LeaderLabel string
}

func newRouteOptions() routeOptions {
	return routeOptions{Mode: string(routing.ModeNone), LeaderLabel: routing.DefaultLeaderLabel}
}

// addFlags registers the routing flags on fs.
func (r *routeOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&r.Mode, "route", r.Mode, "How traffic reaches the leader besides --readiness: \"none\", \"endpointslice\" (the leader writes the EndpointSlice of --service) or \"label\" (the leader's pod carries --leader-label=true).")
	fs.StringVar(&r.Service, "service", r.Service, "With --route=endpointslice: the Service, without a selector, whose EndpointSlice the leader writes (in the Lease's namespace).")
	fs.StringVar(&r.PodIP, "pod-ip", r.PodIP, "With --route=endpointslice: this pod's IP, the endpoint the leader publishes (default $POD_IP).")
	fs.StringVar(&r.LeaderLabel, "leader-label", r.LeaderLabel, "With --route=label: the label set to \"true\" on the leader's pod and \"false\" on the others.")
}

// complete fills in the pod IP from the downward API's $POD_IP.
func (r *routeOptions) complete(env Environment) {
	if r.PodIP == "" {
		r.PodIP, _ = env.lookupEnv("POD_IP")
	}
}

// validate checks that the chosen mode has what it needs; every failure is
// its own error. leaseName is the group label's value in label mode (the
// identity, the pod patched in label mode, is checked by Validate for every
// mode).
func (r *routeOptions) validate(leaseName string) []error {
	var errs []error
	switch routing.Mode(r.Mode) {
	case routing.ModeNone:
	case routing.ModeEndpointSlice:
		switch {
		case r.Service == "":
			errs = append(errs, errors.New("--route=endpointslice needs --service (a Service without a selector)"))
		default:
			if msgs := validation.IsDNS1035Label(r.Service); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("--service %q is not a valid Service name: %s", r.Service, strings.Join(msgs, "; ")))
			}
		}
		switch {
		case r.PodIP == "":
			errs = append(errs, errors.New("--route=endpointslice needs --pod-ip or $POD_IP (the downward API's status.podIP)"))
		default:
			if err := validatePodIP(r.PodIP); err != nil {
				errs = append(errs, err)
			}
		}
	case routing.ModeLabel:
		if msgs := validation.IsQualifiedName(r.LeaderLabel); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--leader-label %q is not a valid label key: %s", r.LeaderLabel, strings.Join(msgs, "; ")))
		}
		if r.LeaderLabel == routing.GroupLabel {
			errs = append(errs, fmt.Errorf("--leader-label must not be %s, which names the pods' Lease", routing.GroupLabel))
		}
		if why := routing.ReservedLabel(r.LeaderLabel); why != "" {
			errs = append(errs, fmt.Errorf("--leader-label %q is reserved: %s (label mode rewrites it on every pod, which can take the pods from their controller); choose a key under your own prefix", r.LeaderLabel, why))
		}
		if msgs := validation.IsValidLabelValue(leaseName); leaseName != "" && len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--route=label labels pods with the Lease's name, and %q is not a valid label value: %s", leaseName, strings.Join(msgs, "; ")))
		}
	default:
		errs = append(errs, fmt.Errorf("--route %q is unknown (want \"none\", \"endpointslice\" or \"label\")", r.Mode))
	}
	return errs
}
