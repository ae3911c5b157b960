package options

import (
	"github.com/spf13/pflag"

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
