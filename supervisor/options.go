package supervisor

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/logging"
)

// EnvLogFormat gives --log-format when the command line does not, as the
// sidecar's own variable does: one setting can serve both containers.
const EnvLogFormat = "LEADER_ELECTOR_LOG_FORMAT"

// Options are `leader-elector run`'s command line.
type Options struct {
	URL            string
	StopGrace      time.Duration
	StartDelay     time.Duration
	OnExit         string
	PollInterval   time.Duration
	OnStartLeading string
	OnStopLeading  string
	HookTimeout    time.Duration
	CopyTo         string
	RestartBackoff time.Duration
	LogFormat      string
	// Partitions: partition mode, one supervised child per owned
	// partition (partitions.go).
	Partitions bool
	// PartitionTerm is set (hidden --partition-term=P@T) in the supervisor
	// process of one partition term that partition mode starts.
	PartitionTerm *PartitionTerm
	// Verbosity is -v, klog's verbosity (klog itself applies it).
	Verbosity int
	// Command is what follows --.
	Command []string

	// commandAfterDash: the arguments, if any, follow "--".
	commandAfterDash bool
	// startDelayGiven: --start-delay was given; else it is --stop-grace +
	// 500ms, in range whenever --stop-grace is.
	startDelayGiven bool
	// logFormatFrom names where LogFormat came from, for a refusal.
	logFormatFrom string
	lookupEnv     func(string) (string, bool)
}

func newOptions() *Options {
	return &Options{
		StopGrace:      2 * time.Second,
		OnExit:         OnExitRelease,
		PollInterval:   200 * time.Millisecond,
		HookTimeout:    10 * time.Second,
		RestartBackoff: time.Second,
		LogFormat:      logging.FormatText,
		logFormatFrom:  "--log-format",
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.URL, "url", o.URL, "The sidecar's application API, on a loopback host (default $"+api.EnvURL+", else http://<$"+api.EnvHTTPAddress+">, else "+api.DefaultBaseURL+").")
	fs.DurationVar(&o.StopGrace, "stop-grace", o.StopGrace, "SIGTERM this long before the claim ends; SIGKILL at its end. Must be below the sidecar's --renew-deadline.")
	fs.DurationVar(&o.StartDelay, "start-delay", o.StartDelay, "Wait this long after this pod begins leading before starting the child, so that the previous leader's child has finished its --stop-grace after a release (default --stop-grace + 500ms; give the same --stop-grace on every pod).")
	fs.StringVar(&o.OnExit, "on-exit", o.OnExit, `When the child exits by itself while leading: "release" (release leadership, exit with its code), "restart" (start it again, with back-off), "exit" (exit with its code).`)
	fs.DurationVar(&o.PollInterval, "poll-interval", o.PollInterval, "How often to read GET /leader while running: each read extends the deadline.")
	fs.StringVar(&o.OnStartLeading, "on-start-leading", o.OnStartLeading, "A shell command (/bin/sh -c) to run when this pod's claim begins, with the child's environment; the command after -- is then optional.")
	fs.StringVar(&o.OnStopLeading, "on-stop-leading", o.OnStopLeading, "A shell command to run when the claim ends (the sidecar says so, or it runs out unrenewed).")
	fs.DurationVar(&o.HookTimeout, "hook-timeout", o.HookTimeout, "A hook still running after this long is killed with its process group.")
	fs.StringVar(&o.CopyTo, "copy-to", o.CopyTo, "Copy this binary to the given path (mode 0755) and exit: for an init container that puts it in a volume shared with the app's container (the image has no shell and no cp).")
	fs.DurationVar(&o.RestartBackoff, "restart-backoff", o.RestartBackoff, "The first delay of --on-exit=restart; it doubles up to 30s while the child keeps exiting.")
	fs.BoolVar(&o.Partitions, "partitions", o.Partitions, "Partition mode: run the command once per partition this pod owns (the sidecar runs with --partitions), each child within its partition's claim, with $"+EnvPartition+" and $"+EnvPartitions+"; a draining partition's child gets SIGTERM at once, is killed at the drain's deadline, and its exit releases the partition.")
	fs.Var(partitionTermFlag{&o.PartitionTerm}, "partition-term", "Internal: the one partition term this process supervises (set by --partitions).")
	_ = fs.MarkHidden("partition-term")
	fs.StringVar(&o.LogFormat, "log-format", o.LogFormat, `The supervisor's log format: "text" (klog's) or "json" (the Kubernetes JSON log format), as the sidecar's (default $`+EnvLogFormat+`, else "text").`)
	fs.AddGoFlag(logging.VerbosityFlag())
}

// validatePartitions checks what --partitions does not take.
func (o *Options) validatePartitions() []error {
	var errs []error
	if o.PartitionTerm != nil && !o.Partitions {
		errs = append(errs, errors.New("--partition-term is internal to --partitions"))
	}
	if !o.Partitions {
		return errs
	}
	if len(o.Command) == 0 {
		errs = append(errs, errors.New("--partitions runs the command after -- once per owned partition: want a command"))
	}
	if o.OnStartLeading != "" || o.OnStopLeading != "" {
		errs = append(errs, errors.New("--on-start-leading and --on-stop-leading follow one leadership; they cannot be combined with --partitions (the child's start and exit are the partition's)"))
	}
	if o.OnExit == OnExitExit {
		errs = append(errs, errors.New("--on-exit=exit cannot be combined with --partitions: one partition's child would end every other's; use release (the partition goes back to the group) or restart"))
	}
	return errs
}

// partitionTermFlag parses --partition-term=P@T.
type partitionTermFlag struct{ pt **PartitionTerm }

func (f partitionTermFlag) String() string {
	if *f.pt == nil {
		return ""
	}
	return (*f.pt).String()
}

func (f partitionTermFlag) Set(v string) error {
	p, t, ok := strings.Cut(v, "@")
	i, err1 := strconv.Atoi(p)
	token, err2 := strconv.ParseInt(t, 10, 64)
	if !ok || err1 != nil || err2 != nil || i < 0 || token < 0 {
		return fmt.Errorf("want P@T, two numbers, got %q", v)
	}
	*f.pt = &PartitionTerm{Partition: i, Token: token}
	return nil
}

func (partitionTermFlag) Type() string { return "partition@token" }

// newFlagSet registers o's flags on a new flag set.
func newFlagSet(o *Options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("leader-elector run", pflag.ContinueOnError)
	// Errors are reported by Main in one line; pflag would add the usage.
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	// Flags end at the first non-flag: everything after "--" is the
	// child's, however it looks.
	fs.SetInterspersed(false)
	o.AddFlags(fs)
	return fs
}

// parseOptions reads the command line, and the environment for what the
// command line leaves out, and fills in the defaults that depend on other
// flags. It does not validate (Validate does); the error is the parser's
// (pflag.ErrHelp for --help).
func parseOptions(args []string, lookupEnv func(string) (string, bool)) (*Options, *pflag.FlagSet, error) {
	o := newOptions()
	fs := newFlagSet(o)
	if err := fs.Parse(args); err != nil {
		return nil, fs, err
	}
	o.lookupEnv = lookupEnv
	o.Command = fs.Args()
	o.commandAfterDash = fs.ArgsLenAtDash() == 0
	if !fs.Changed("log-format") {
		if v, ok := lookupEnv(EnvLogFormat); ok && v != "" {
			o.LogFormat, o.logFormatFrom = v, "$"+EnvLogFormat
		}
	}
	o.startDelayGiven = fs.Changed("start-delay")
	if !o.startDelayGiven {
		o.StartDelay = o.StopGrace + 500*time.Millisecond
	}
	if v, err := strconv.Atoi(fs.Lookup("v").Value.String()); err == nil {
		o.Verbosity = v
	}
	return o, fs, nil
}

// Validate checks every option, each on its own: the error joins one per
// problem. --copy-to is a mode of its own, which takes nothing else.
func (o *Options) Validate() error {
	if o.CopyTo != "" {
		if len(o.Command) > 0 {
			return errors.New("--copy-to takes no command")
		}
		return nil
	}
	var errs []error
	switch {
	case len(o.Command) > 0 && !o.commandAfterDash:
		errs = append(errs, errors.New("want the command after --: leader-elector run [flags] -- CMD [ARGS...]"))
	case len(o.Command) == 0 && o.OnStartLeading == "" && o.OnStopLeading == "":
		errs = append(errs, errors.New("want the command after -- (or a hook): leader-elector run [flags] -- CMD [ARGS...]"))
	}
	for _, r := range []struct {
		flag     string
		value    time.Duration
		min, max time.Duration
		text     string
	}{
		{"--hook-timeout", o.HookTimeout, 1, 10 * time.Minute, "1ns..10m"},
		{"--stop-grace", o.StopGrace, 1, 5 * time.Minute, "1ns..5m"},
		{"--poll-interval", o.PollInterval, 10 * time.Millisecond, 5 * time.Second, "10ms..5s"},
		{"--restart-backoff", o.RestartBackoff, 10 * time.Millisecond, maxRestartBackoff, "10ms..30s"},
		{"--start-delay", o.StartDelay, 0, 5 * time.Minute, "0..5m"},
	} {
		if r.flag == "--start-delay" && !o.startDelayGiven {
			continue
		}
		if r.value < r.min || r.value > r.max {
			errs = append(errs, fmt.Errorf("%s %v is outside the supported range %s", r.flag, r.value, r.text))
		}
	}
	switch o.OnExit {
	case OnExitRelease, OnExitRestart, OnExitExit:
	default:
		errs = append(errs, fmt.Errorf("--on-exit %q is unknown (want release, restart or exit)", o.OnExit))
	}
	errs = append(errs, o.validatePartitions()...)
	if !logging.ValidFormat(o.LogFormat) {
		errs = append(errs, fmt.Errorf("%s %q is unknown (want \"text\" or \"json\")", o.logFormatFrom, o.LogFormat))
	}
	if _, err := baseURL(o.URL, o.lookupEnv); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
