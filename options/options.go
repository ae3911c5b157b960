package options

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leasetimings"
	"github.com/leader-elector/leader-elector/logging"
	"github.com/leader-elector/leader-elector/partition"
)

// envPrefix is the prefix of the environment variable of every flag:
// --lease-name comes from LEADER_ELECTOR_LEASE_NAME unless given on the
// command line.
const envPrefix = "LEADER_ELECTOR_"

// serviceAccountNamespaceFile holds the pod's namespace when it runs with a
// mounted service account token.
const serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// options is everything the command line and the environment configure.
type Options struct {
	LeaseName         string
	LeaseNamespace    string
	Identity          string
	LeaseDuration     time.Duration
	RenewDeadline     time.Duration
	RetryPeriod       time.Duration
	HTTPAddress       string
	ProbeAddress      string
	Readiness         string
	ReleaseOnShutdown bool
	// Events records Kubernetes Events on the Lease (leader election only).
	Events       bool
	Kubeconfig   string
	KubeAPIQPS   float32
	KubeAPIBurst int
	LogFormat    string
	// Verbosity is -v, klog's verbosity (klog itself applies it).
	Verbosity int
	Version   bool
	Routing   routeOptions
	// Health gates candidacy on the app's health (--app-health-url).
	Health healthOptions
	// Advertise is the leader's address on the Lease.
	Advertise advertiseOptions
	// Partitions > 0 turns on partition mode (see package partition).
	Partitions int
	// DrainTimeout is how long partition mode waits for the app to release
	// a partition it is to hand over (0: it does not wait).
	DrainTimeout time.Duration
	// drainTimeoutGiven: --drain-timeout came from the command line or its
	// variable.
	drainTimeoutGiven bool
	Campaign          campaignOptions
	// Notify configures --on-change-url.
	Notify notifyOptions
	// Proxy configures the forwarding proxy (--proxy-address).
	Proxy proxyOptions
	// LeaseStore is --lease-store: "kubernetes" or "file:PATH".
	LeaseStore string
	// kubernetesOnlyGiven lists the Kubernetes-only flags given, which
	// the file lease store refuses.
	kubernetesOnlyGiven []string

	// Aliases of the retired k8s.gcr.io/leader-elector image.
	election          string
	electionNamespace string
	id                string
	http              string
	ttl               time.Duration
	// useClusterCredentials is accepted and ignored (contrib.go).
	useClusterCredentials bool
	// loggingFormat is --logging-format, Kubernetes components' name of
	// --log-format (see aliases).
	loggingFormat string

	// deprecated lists the aliases that were used, for a warning once the
	// logger is set up.
	deprecated []string
	// ttlDerived lists the timings --ttl derived, for the same warning.
	ttlDerived []string
	// noOps lists the retired image's flags that were given and do nothing.
	noOps []string
	// serviceLinks lists the LEADER_ELECTOR_* variables that are the
	// kubelet's service links, not settings, for a log line.
	serviceLinks []string
	// shadowingLinks lists the service links that have the name of a flag's
	// variable and were not taken as the flag, for a warning.
	shadowingLinks []string
}

// environment is what options read from the process's surroundings, so that
// tests can supply their own.
type Environment struct {
	lookupEnv func(string) (string, bool)
	readFile  func(string) ([]byte, error)
	hostname  func() (string, error)
	// environ lists every variable as NAME=value; nil skips the check of
	// unknown LEADER_ELECTOR_* names.
	environ func() []string
}

var OSEnvironment = Environment{lookupEnv: os.LookupEnv, readFile: os.ReadFile, hostname: os.Hostname, environ: os.Environ}

func newOptions() *Options {
	return &Options{
		LeaseDuration:     15 * time.Second,
		RenewDeadline:     10 * time.Second,
		RetryPeriod:       2 * time.Second,
		DrainTimeout:      10 * time.Second,
		HTTPAddress:       "127.0.0.1:4040",
		ProbeAddress:      ":8080",
		Readiness:         string(httpapi.ReadyWhenLeader),
		ReleaseOnShutdown: true,
		Events:            true,
		LogFormat:         logging.FormatText,
		Routing:           newRouteOptions(),
		Health:            newHealthOptions(),
		Campaign:          newCampaignOptions(),
		Notify:            newNotifyOptions(),
		Proxy:             newProxyOptions(),
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.addLeaseStoreFlag(fs)
	fs.StringVar(&o.LeaseName, "lease-name", o.LeaseName, "Name of the coordination.k8s.io/v1 Lease to elect a leader on (required; a DNS-1123 subdomain).")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "Namespace of the Lease (default $POD_NAMESPACE, else the service account's namespace, else \"default\").")
	fs.StringVar(&o.Identity, "identity", o.Identity, "This candidate's holder identity (default $POD_NAME, else the hostname).")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", o.LeaseDuration, "How long the Lease is valid without renewal; whole seconds only.")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", o.RenewDeadline, "How long the leader keeps retrying a renewal before it gives up leadership; also how long after a renewal starts it still claims leadership.")
	fs.DurationVar(&o.RetryPeriod, "retry-period", o.RetryPeriod, "How often candidates and the leader try the Lease.")
	fs.StringVar(&o.HTTPAddress, "http-address", o.HTTPAddress, "Address of the application API (localhost only by default).")
	fs.StringVar(&o.ProbeAddress, "probe-address", o.ProbeAddress, "Address of /readyz, /healthz and /metrics.")
	fs.StringVar(&o.Readiness, "readiness", o.Readiness, "What /readyz reports: \"leader\" (ready only while this pod leads) or \"candidate\" (ready once the elector has reached the API server).")
	fs.BoolVar(&o.ReleaseOnShutdown, "release-on-shutdown", o.ReleaseOnShutdown, "On SIGTERM/SIGINT, stop claiming leadership, then clear the Lease so a standby takes over at once.")
	fs.BoolVar(&o.Events, "events", o.Events, "Record Kubernetes Events on the Lease when this pod becomes leader and when it stops leading, with the fencing token (needs create on events; leader election only, not with --partitions).")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "Path to a kubeconfig file, for running outside a pod (default $KUBECONFIG, else in-cluster configuration).")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", o.KubeAPIQPS, "Queries per second to the API server (0: client-go's default).")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", o.KubeAPIBurst, "Burst of queries to the API server (0: client-go's default).")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, "Log format: \"text\" (klog's) or \"json\" (the Kubernetes JSON log format).")
	fs.StringVar(&o.loggingFormat, "logging-format", "", "Same as --log-format (the name Kubernetes components use).")
	fs.BoolVar(&o.Version, "version", o.Version, "Print the version and exit.")
	o.Campaign.addFlags(fs)
	o.Routing.addFlags(fs)
	o.Health.addFlags(fs)
	o.Advertise.addFlags(fs)
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, fmt.Sprintf("Partition mode: spread this many partition Leases (<lease-name>-p<i>, 1..%d) fairly across the pods of the group --lease-name; 0 (default) is leader election.", partition.MaxPartitions))
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", o.DrainTimeout, fmt.Sprintf("Partition mode: how long a partition this pod is to hand over (it owns more than its fair share) is shown as draining for the app to finish, checkpoint and release it, before the pod releases it anyway (0s..%v; 0: at once). Only with --partitions.", partition.MaxDrainTimeout))
	o.Notify.addFlags(fs)
	o.Proxy.addFlags(fs)

	fs.StringVar(&o.election, "election", "", "Deprecated: use --lease-name.")
	fs.StringVar(&o.electionNamespace, "election-namespace", "", "Deprecated: use --lease-namespace.")
	fs.StringVar(&o.id, "id", "", "Deprecated: use --identity.")
	fs.StringVar(&o.http, "http", "", "Deprecated: use --http-address.")
	fs.DurationVar(&o.ttl, "ttl", 0, "Deprecated: use --lease-duration (--renew-deadline and --retry-period, unless given, are derived in the defaults' ratios).")
	fs.BoolVar(&o.useClusterCredentials, "use-cluster-credentials", false, "Deprecated, no effect: credentials come from --kubeconfig, else $KUBECONFIG, else the pod's service account.")
	_ = fs.MarkDeprecated("use-cluster-credentials", "it has no effect")
	for alias, replacement := range deprecatedAliases {
		_ = fs.MarkDeprecated(alias, "use --"+replacement)
	}

	// Only klog's verbosity is part of the contract; its other flags
	// (log files, header formats) are not exposed.
	fs.AddGoFlag(logging.VerbosityFlag())
}

// aliases maps each alias that is not deprecated to the flag it stands for:
// another name users know from elsewhere. It is applied as the deprecated
// ones are (resolveAliases), without the warning: pflag's own aliasing
// (two flags on one variable) would let the environment's value of one
// override the command line's value of the other.
var aliases = map[string]string{
	"logging-format": "log-format",
}

// aliasTarget returns the flag an alias (deprecated or not) stands for.
func aliasTarget(name string) (string, bool) {
	if target, ok := deprecatedAliases[name]; ok {
		return target, true
	}
	target, ok := aliases[name]
	return target, ok
}

// deprecatedAliases maps each alias to the flag it stands for.
var deprecatedAliases = map[string]string{
	"election":           "lease-name",
	"election-namespace": "lease-namespace",
	"id":                 "identity",
	"http":               "http-address",
	"ttl":                "lease-duration",
}

// applyEnvironment sets every flag not given on the command line from its
// LEADER_ELECTOR_* variable. An alias is not taken from the environment
// when its flag was given on the command line. A variable whose value is a
// Kubernetes service link (isServiceLinkAddress) sets nothing; those are
// returned.
func applyEnvironment(fs *pflag.FlagSet, env Environment) (skipped []string, err error) {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" || f.Name == "version" {
			return
		}
		if target, isAlias := aliasTarget(f.Name); isAlias && fs.Changed(target) {
			return
		}
		name := envName(f.Name)
		value, ok := env.lookupEnv(name)
		if !ok {
			return
		}
		if isServiceLinkAddress(name, value) {
			skipped = append(skipped, name)
			return
		}
		if err := fs.Set(f.Name, value); err != nil {
			errs = append(errs, fmt.Errorf("invalid %s=%q: %w", name, value, err))
		}
	})
	return skipped, errors.Join(errs...)
}

// complete fills in the defaults that depend on the environment. It runs
// after the flags, the aliases and the environment are applied.
func (o *Options) complete(env Environment) {
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = defaultNamespace(env)
	}
	if o.Identity == "" {
		if v, ok := env.lookupEnv("POD_NAME"); ok && v != "" {
			o.Identity = v
		} else if h, err := env.hostname(); err == nil {
			o.Identity = h
		}
	}
	if o.Kubeconfig == "" {
		o.Kubeconfig, _ = env.lookupEnv("KUBECONFIG")
	}
	o.Routing.complete(env)
	o.Advertise.complete(env)
	o.Health.complete(env)
}

// resolveAliases copies each alias that was set, and not yet copied, into
// its flag. It runs once for the command line and once for the
// environment, so that the command line wins over the environment whether
// either uses the alias or the flag; an alias and its flag that disagree at
// the same level are an error.
func (o *Options) resolveAliases(fs *pflag.FlagSet, done map[string]bool) error {
	var errs []error
	for _, alias := range []string{"election", "election-namespace", "id", "http", "ttl", "logging-format"} {
		if done[alias] || !fs.Changed(alias) {
			continue
		}
		done[alias] = true
		target, _ := aliasTarget(alias)
		kind := "alias"
		if _, deprecated := deprecatedAliases[alias]; deprecated {
			kind = "deprecated alias"
			o.deprecated = append(o.deprecated, alias)
		}
		value := fs.Lookup(alias).Value.String()
		if fs.Changed(target) {
			if current := fs.Lookup(target).Value.String(); current != value {
				errs = append(errs, fmt.Errorf("--%s and its %s --%s disagree (%q, %q); give only --%s", target, kind, alias, current, value, target))
			}
			continue
		}
		if err := fs.Set(target, value); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", alias, err))
		}
	}
	return errors.Join(errs...)
}

func defaultNamespace(env Environment) string {
	if v, ok := env.lookupEnv("POD_NAMESPACE"); ok && v != "" {
		return v
	}
	if b, err := env.readFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// Validate checks every option; each check is independent, and all failures
// are reported together.
func (o *Options) Validate() error {
	var errs []error
	switch {
	case o.LeaseName == "":
		errs = append(errs, errors.New("--lease-name is required"))
	default:
		if msgs := validation.IsDNS1123Subdomain(o.LeaseName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--lease-name %q is not a valid DNS-1123 subdomain: %s", o.LeaseName, strings.Join(msgs, "; ")))
		}
	}
	if msgs := validation.IsDNS1123Label(o.LeaseNamespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("--lease-namespace %q is not a valid namespace: %s", o.LeaseNamespace, strings.Join(msgs, "; ")))
	}
	if strings.TrimSpace(o.Identity) == "" {
		errs = append(errs, errors.New("--identity is empty and neither $POD_NAME nor the hostname is available"))
	}

	timingErrs := o.timings().Check(leasetimings.FlagTimingNames)
	if o.timingOutOfRange() {
		// The margin is then the range error's consequence, not a second
		// mistake.
		timingErrs = slices.DeleteFunc(timingErrs, func(err error) bool { return errors.Is(err, leasetimings.ErrShortMargin) })
	}
	errs = append(errs, timingErrs...)
	errs = append(errs, o.validateInputs()...)

	for _, a := range []struct{ name, value string }{{"http-address", o.HTTPAddress}, {"probe-address", o.ProbeAddress}} {
		if err := validateAddress(a.value); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: %w", a.name, a.value, err))
		}
	}
	if overlapping(o.HTTPAddress, o.ProbeAddress) {
		errs = append(errs, fmt.Errorf("--http-address %q and --probe-address %q would listen on the same port; the application API and the probes need separate listeners", o.HTTPAddress, o.ProbeAddress))
	}
	switch httpapi.Readiness(o.Readiness) {
	case httpapi.ReadyWhenLeader, httpapi.ReadyWhenCandidate:
	default:
		errs = append(errs, fmt.Errorf("--readiness %q is unknown (want \"leader\" or \"candidate\")", o.Readiness))
	}
	if !logging.ValidFormat(o.LogFormat) {
		errs = append(errs, fmt.Errorf("--log-format %q is unknown (want \"text\" or \"json\")", o.LogFormat))
	}
	if o.KubeAPIQPS < 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must not be negative, got %v", o.KubeAPIQPS))
	}
	if o.KubeAPIBurst < 0 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must not be negative, got %d", o.KubeAPIBurst))
	}
	errs = append(errs, o.validateLeaseStore()...)
	errs = append(errs, o.validatePartitions()...)
	errs = append(errs, o.validateHealth()...)
	errs = append(errs, o.validateCampaign()...)
	// What each routing mode needs is routing's rule (routing.Config.Validate).
	if err := o.routingConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, o.Advertise.validate(o.Partitions)...)
	errs = append(errs, o.Notify.validate()...)
	errs = append(errs, o.Proxy.validate(o.HTTPAddress, o.ProbeAddress, o.Partitions)...)
	return errors.Join(errs...)
}

// ErrHelp is returned by Parse when help was asked for; Usage is the text.
var ErrHelp = pflag.ErrHelp

// Parse reads the command line and the environment into Options, filling
// in the defaults and checking every option. A refusal joins one error per
// problem; print it with textline.OneLine.
func Parse(args []string, env Environment) (*Options, error) {
	o, fs, err := parse(args, env)
	if err != nil {
		return nil, err
	}
	o.Verbosity = verbosity(fs)
	return o, nil
}

// Usage lists the flags, for --help.
func Usage() string {
	return usageHeader + newFlagSet(newOptions()).FlagUsages() + usageFooter
}

// Commands are the subcommands main dispatches before these flags are
// parsed; named here for the usage text and for "did you mean" (main's
// test checks that each is dispatched).
var Commands = []string{"run", "status"}

const usageHeader = `Usage:
  leader-elector [flags]                       elect on --lease-name; serve /leader on --http-address
  leader-elector run [flags] -- CMD [ARG...]   run CMD only while this pod leads (run --help)
  leader-elector status [flags]                who leads, as the local sidecar sees it (status --help)

Every flag can also be set as LEADER_ELECTOR_<FLAG> (--lease-name: LEADER_ELECTOR_LEASE_NAME).

Flags:
`

const usageFooter = `
Docs: https://github.com/leader-elector/leader-elector/blob/main/docs/operations.md#flags
`

// newFlagSet registers o's flags on a new flag set.
func newFlagSet(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("leader-elector", pflag.ContinueOnError)
	// Errors are reported by the caller in one line; pflag would add the usage.
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	o.AddFlags(fs)
	return fs
}

// parse is Parse, and also returns the flag set for the tests.
func parse(args []string, env Environment) (*Options, *pflag.FlagSet, error) {
	o := newOptions()
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, fs, suggestFlag(fs, err)
	}
	if fs.NArg() > 0 {
		if near := nearest(fs.Arg(0), Commands); near != "" && len(args) > 0 && args[0] == fs.Arg(0) {
			return nil, fs, fmt.Errorf("unknown command %q (did you mean %q?)", fs.Arg(0), near)
		}
		return nil, fs, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.Version {
		return o, fs, nil
	}
	resolved := map[string]bool{}
	if err := o.resolveAliases(fs, resolved); err != nil {
		return nil, fs, err
	}
	shadowing, err := applyEnvironment(fs, env)
	if err != nil {
		return nil, fs, err
	}
	serviceLinks, err := unknownEnvironment(fs, env)
	if err != nil {
		return nil, fs, err
	}
	o.serviceLinks = serviceLinks
	o.shadowingLinks = shadowing
	if err := o.resolveAliases(fs, resolved); err != nil {
		return nil, fs, err
	}
	if err := o.applyContrib(fs); err != nil {
		return nil, fs, err
	}
	o.noteGivenFlags(fs)
	o.complete(env)
	o.completeCampaign(fs)
	o.drainTimeoutGiven = fs.Changed("drain-timeout")
	o.Proxy.complete(fs, o.RenewDeadline)
	if err := o.Validate(); err != nil {
		return nil, fs, err
	}
	return o, fs, nil
}

// verbosity returns the -v level.
func verbosity(fs *pflag.FlagSet) int {
	f := fs.Lookup("v")
	if f == nil {
		return 0
	}
	v, err := strconv.Atoi(f.Value.String())
	if err != nil {
		return 0
	}
	return v
}

// LogNotices logs, once the logger is set up, what parsing noticed without
// refusing it: deprecated flags in use, and service link variables ignored.
func (o *Options) LogNotices(logger klog.Logger) {
	for _, alias := range o.deprecated {
		if alias == "ttl" {
			o.logTTL(logger)
			continue
		}
		logger.Info("Flag is deprecated", "flag", "--"+alias, "use", "--"+deprecatedAliases[alias])
	}
	o.logContrib(logger)
	if len(o.serviceLinks) > 0 {
		logger.Info("Ignoring environment variables that are Kubernetes service links, not settings", "variables", o.serviceLinks)
	}
	for _, name := range o.shadowingLinks {
		// klog has no warning level; the message says it is one.
		logger.Info("Warning: ignoring a Kubernetes service link that has the name of a flag's variable; the flag keeps its default (set enableServiceLinks: false in the pod spec, or rename the Service)",
			"variable", name, "flag", "--"+flagOfVariable(name))
	}
}

// flagOfVariable is the flag a LEADER_ELECTOR_* variable sets (envName
// reversed).
func flagOfVariable(name string) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, envPrefix), "_", "-"))
}
