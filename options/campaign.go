package options

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/election"
	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/routing"
)

// campaignOptions say when this pod tries to take the Lease, and how hard
// POST /acquire tries.
type campaignOptions struct {
	// Campaign is "auto" or "manual" (election.Campaign).
	Campaign          string
	AcquireRetries    int
	AcquireRetryDelay time.Duration
	// Candidate false makes the pod an observer: it never writes the Lease.
	Candidate bool
}

func newCampaignOptions() campaignOptions {
	return campaignOptions{
		Campaign:          string(election.CampaignAuto),
		AcquireRetries:    3,
		AcquireRetryDelay: 500 * time.Millisecond,
		Candidate:         true,
	}
}

func (c *campaignOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Campaign, "campaign", c.Campaign, "When this pod tries to take the Lease: \"auto\" (always, except for a lease duration after POST /release) or \"manual\" (only when the app asks with POST /acquire).")
	fs.IntVar(&c.AcquireRetries, "acquire-retries", c.AcquireRetries, fmt.Sprintf("How many attempts POST /acquire makes at the Lease, unless its query says (1..%d).", httpapi.MaxAcquireRetries))
	fs.DurationVar(&c.AcquireRetryDelay, "acquire-retry-delay", c.AcquireRetryDelay, fmt.Sprintf("Time between the attempts of POST /acquire, unless its query says (0s..%v).", httpapi.MaxAcquireRetryDelay))
	fs.BoolVar(&c.Candidate, "candidate", c.Candidate, "Take part in the election; false makes this pod an observer, which never writes the Lease (it needs only get, list and watch) and answers who leads.")
}

// completeCampaign: an observer never leads, so unless --readiness was
// given, it is ready once it has reached the API server.
func (o *Options) completeCampaign(fs *pflag.FlagSet) {
	if !o.Campaign.Candidate && !fs.Changed("readiness") {
		o.Readiness = string(httpapi.ReadyWhenCandidate)
	}
}

// validateCampaign checks the campaign flags and what an observer or a
// manual campaign asks of the other options.
func (o *Options) validateCampaign() []error {
	var errs []error
	c := o.Campaign
	switch election.Campaign(c.Campaign) {
	case election.CampaignAuto, election.CampaignManual:
	default:
		errs = append(errs, fmt.Errorf("--campaign %q is unknown (want \"auto\" or \"manual\")", c.Campaign))
	}
	if c.AcquireRetries < 1 || c.AcquireRetries > httpapi.MaxAcquireRetries {
		errs = append(errs, fmt.Errorf("--acquire-retries must be within 1..%d, got %d", httpapi.MaxAcquireRetries, c.AcquireRetries))
	}
	if c.AcquireRetryDelay < 0 || c.AcquireRetryDelay > httpapi.MaxAcquireRetryDelay {
		errs = append(errs, fmt.Errorf("--acquire-retry-delay must be within 0s..%v, got %v", httpapi.MaxAcquireRetryDelay, c.AcquireRetryDelay))
	} else if err := httpapi.CheckAcquireSpan(o.acquireOptions()); err != nil {
		errs = append(errs, fmt.Errorf("--acquire-retries and --acquire-retry-delay: %w", err))
	}
	if o.Partitions > 0 && c.Campaign != string(election.CampaignAuto) {
		errs = append(errs, fmt.Errorf("--campaign=%s is for leader election; partition mode spreads its partitions by itself", c.Campaign))
	}
	if c.Candidate {
		return errs
	}
	if c.Campaign == string(election.CampaignManual) {
		errs = append(errs, fmt.Errorf("--campaign=manual campaigns when asked, and --candidate=false never does; give one of them"))
	}
	if o.Partitions > 0 {
		errs = append(errs, fmt.Errorf("--candidate=false is for leader election; a partition group member always takes part"))
	}
	if o.Readiness == string(httpapi.ReadyWhenLeader) {
		errs = append(errs, fmt.Errorf("--readiness=leader would never pass with --candidate=false (an observer never leads); use --readiness=candidate"))
	}
	if o.Routing.Mode != string(routing.ModeNone) {
		errs = append(errs, fmt.Errorf("--route=%s publishes the leader this pod would be; it cannot be combined with --candidate=false", o.Routing.Mode))
	}
	if o.Health.URL != "" {
		errs = append(errs, fmt.Errorf("--app-health-url gates this pod's candidacy, and --candidate=false has none; give one of them"))
	}
	if o.Health.NameSuccessor {
		errs = append(errs, fmt.Errorf("--name-successor publishes this pod as a candidate, and --candidate=false is none; give one of them"))
	}
	if o.Advertise.Port != 0 {
		errs = append(errs, fmt.Errorf("--advertise-port publishes the address of the leader this pod would be, and --candidate=false never leads; give one of them"))
	}
	return errs
}

// campaign is the elector's campaign.
func (o *Options) campaign() election.Campaign {
	if !o.Campaign.Candidate {
		return election.CampaignNever
	}
	return election.Campaign(o.Campaign.Campaign)
}

// acquireOptions are what POST /acquire does without a query.
func (o *Options) acquireOptions() leadership.AcquireOptions {
	return leadership.AcquireOptions{Attempts: o.Campaign.AcquireRetries, RetryDelay: o.Campaign.AcquireRetryDelay}
}
