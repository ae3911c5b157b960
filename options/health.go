package options

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/health"
)

// healthOptions configures health-gated candidacy (--app-health-url).
type healthOptions struct {
	URL string
	// NameSuccessor: the candidates Lease without health gating.
	NameSuccessor bool
	// CheckPod: never start a term once this pod is terminating.
	CheckPod            bool
	Period              time.Duration
	Failures, Successes int
	// Revision is this pod's revision: a release names a successor of the
	// newest one.
	Revision string
	// HandoverAfter: a leader of an older revision hands over once a
	// candidate of the newest has been ready this long; 0 is off.
	HandoverAfter time.Duration
}

// maxHandoverAfter bounds --handover-to-newer-revision: a rollout's new
// pods are ready within minutes, and a longer wait is a rollout the leader
// outlives anyway.
const maxHandoverAfter = 10 * time.Minute

func newHealthOptions() healthOptions {
	return healthOptions{Period: 2 * time.Second, Failures: 3, Successes: 1}
}

// addFlags registers the health gating flags on fs.
func (h *healthOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&h.URL, "app-health-url", h.URL, "Health-gated candidacy: the app's health endpoint, http://127.0.0.1:PORT/PATH (a loopback address; GET, 2xx is healthy). While the app is unhealthy this pod does not campaign and /readyz fails; a leader whose app turns unhealthy steps down when another candidate is healthy (needs the <lease-name>-candidates Lease). With --partitions: a member whose app is unhealthy gives its partitions to the healthy members (through a drain) and takes its share back once healthy. Empty (default): off.")
	fs.BoolVar(&h.NameSuccessor, "name-successor", h.NameSuccessor, "Keep this candidate in the <lease-name>-candidates Lease without probing an app (implied by --app-health-url): a graceful release names its successor (a candidate of the newest --revision), a crash takeover is ranked instead of a race, and --handover-to-newer-revision works. An idle candidate writes its entry every 5 minutes. Needs that Lease and update on it.")
	fs.BoolVar(&h.CheckPod, "check-pod-terminating", h.CheckPod, "With --app-health-url or --name-successor: before starting a term, read this pod (--identity in the Lease's namespace; needs get on pods) and never take the Lease once it is terminating, so that in a rollout an old pod does not lead between the old leader and a new one.")
	fs.DurationVar(&h.Period, "app-health-period", h.Period, "With --app-health-url: time between probes; each probe times out after half of it.")
	fs.IntVar(&h.Failures, "app-health-failures", h.Failures, "With --app-health-url: consecutive failed probes that make the app unhealthy.")
	fs.StringVar(&h.Revision, "revision", h.Revision, "With --app-health-url or --name-successor: this pod's revision, published in its entry; a graceful release names a successor of the newest revision (default $POD_TEMPLATE_HASH, else $CONTROLLER_REVISION_HASH: the pod's labels, through the downward API). A label value.")
	fs.DurationVar(&h.HandoverAfter, "handover-to-newer-revision", h.HandoverAfter, "With --app-health-url or --name-successor, and a --revision: a leader of an older revision hands over (reason handed-over) once a candidate of the newest revision has been able to take over for this long, so that a rollout moves leadership once, before the old leader's pod is deleted. 0s (default): off; up to 10m.")
	fs.IntVar(&h.Successes, "app-health-successes", h.Successes, "With --app-health-url: consecutive successful probes that make the app healthy (it starts unhealthy).")
}

// validateHealth checks the health gating flags (health's rules, with
// this pod's Lease) and what they cannot be combined with.
func (o *Options) validateHealth() []error {
	var errs []error
	if err := o.healthSettings().Validate(); err != nil {
		errs = append(errs, err)
	}
	if msgs := validation.IsValidLabelValue(o.Health.Revision); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--revision %q is not a label value: %s", o.Health.Revision, msgs[0]))
	}
	if o.Health.HandoverAfter < 0 || o.Health.HandoverAfter > maxHandoverAfter {
		errs = append(errs, fmt.Errorf("--handover-to-newer-revision %v is outside the supported range 0s..10m", o.Health.HandoverAfter))
	}
	if o.Health.CheckPod && o.Partitions > 0 {
		errs = append(errs, errors.New("--check-pod-terminating guards one election's terms; it cannot be combined with --partitions"))
	}
	if o.Health.HandoverAfter > 0 && o.Partitions > 0 {
		errs = append(errs, errors.New("--handover-to-newer-revision hands one election over; it cannot be combined with --partitions"))
	}
	if o.Health.CheckPod && o.Health.URL == "" && !o.Health.NameSuccessor {
		errs = append(errs, errors.New("--check-pod-terminating guards the terms of a candidate with --app-health-url or --name-successor; give one of them"))
	}
	if o.Health.NameSuccessor && o.Partitions > 0 {
		errs = append(errs, errors.New("--name-successor names one election's successor; it cannot be combined with --partitions"))
	}
	return errs
}

// healthConfig is the part of the options health gating (or the
// candidates Lease alone, --name-successor) takes; empty when both are off.
func (o *Options) healthConfig() health.Config {
	if o.Health.URL == "" && !o.Health.NameSuccessor {
		return health.Config{}
	}
	return o.healthSettings()
}

// healthSettings are the health gating flags as health.Config, whether or
// not gating is on.
func (o *Options) healthSettings() health.Config {
	return health.Config{
		URL:           o.Health.URL,
		NameSuccessor: o.Health.NameSuccessor,
		CheckPod:      o.Health.CheckPod,
		Period:        o.Health.Period,
		Failures:      o.Health.Failures,
		Successes:     o.Health.Successes,
		Namespace:     o.LeaseNamespace,
		Lease:         o.LeaseName,
		Identity:      o.Identity,
		LeaseDuration: o.LeaseDuration,
		Revision:      o.Health.Revision,
		HandoverAfter: o.Health.HandoverAfter,
	}
}

// complete takes the revision, if not given, from the pod's labels that
// the chart passes through the downward API: pod-template-hash
// (Deployment) or controller-revision-hash (StatefulSet, DaemonSet).
func (h *healthOptions) complete(env Environment) {
	for _, name := range []string{"POD_TEMPLATE_HASH", "CONTROLLER_REVISION_HASH"} {
		if v, ok := env.lookupEnv(name); ok && v != "" && h.Revision == "" {
			h.Revision = v
		}
	}
}
