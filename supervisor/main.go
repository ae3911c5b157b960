package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/internal/textline"
	"github.com/leader-elector/leader-elector/logging"
)

const usage = `Usage: leader-elector run [flags] -- CMD [ARGS...]

Runs CMD only while this pod leads, as told by the sidecar's application API,
and kills it no later than the moment the claim ends (docs/supervisor.md);
--on-start-leading / --on-stop-leading run a command on each transition.
With --partitions, runs CMD once per partition this pod owns, each within
its partition's claim (docs/supervisor.md#partition-mode).
Exit codes: the child's; 1 the supervisor failed; 2 bad flags, or
--stop-grace does not fit in the claim; 126 CMD cannot be executed; 127 CMD
not found.

`

// Main runs `leader-elector run` with args (those after "run") and returns
// the exit code. lookupEnv reads the environment. A refusal is one line on
// stderr; the supervisor's log goes to stderr in JSON, and through klog
// (to the process's standard error) as text.
func Main(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	o, fs, err := parseOptions(args, lookupEnv)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "%s%s", usage, fs.FlagUsages())
		return 0
	case err == nil:
		err = o.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector run: %s\n", textline.OneLine(err))
		return ExitBadInput
	}
	if o.CopyTo != "" {
		if err := copySelf(o.CopyTo); err != nil {
			fmt.Fprintf(stderr, "leader-elector run: --copy-to: %s\n", textline.OneLine(err))
			return ExitRuntimeError
		}
		return 0
	}
	// Fail before waiting for leadership, as a shell would.
	if len(o.Command) > 0 {
		if _, err := exec.LookPath(o.Command[0]); err != nil {
			code := startFailureCode(err)
			fmt.Fprintf(stderr, "leader-elector run: cannot execute %q: %s (exit code %d)\n", o.Command[0], textline.OneLine(err), code)
			return code
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector run: cannot find its own binary for the watchdog: %s\n", textline.OneLine(err))
		return ExitRuntimeError
	}

	logging.SetUp(o.LogFormat, o.Verbosity, stderr)
	defer klog.Flush()
	logger := klog.Background().WithName("leader-elector").WithName("run")
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	if o.Partitions && o.PartitionTerm == nil {
		return RunPartitions(klog.NewContext(context.Background(), logger), o.partitionsConfig(self, args, signals, stderr))
	}
	cfg := o.config(self, signals, stderr)
	if pt := o.PartitionTerm; pt != nil {
		cfg.Partition = pt
		logger = logger.WithValues("partition", pt.Partition, "fencingToken", pt.Token)
	}
	return Run(klog.NewContext(context.Background(), logger), cfg)
}

// partitionsConfig is the dispatcher's config: each partition term's
// supervisor is this binary with args (the flags, "--", the command) and
// --partition-term.
func (o *Options) partitionsConfig(self string, args []string, signals <-chan os.Signal, stderr io.Writer) PartitionsConfig {
	base, _ := baseURL(o.URL, o.lookupEnv) // checked by Validate
	return PartitionsConfig{
		LongPoll: api.NewClient(base, &http.Client{Timeout: longPollWait + 5*time.Second}),
		Supervise: func(pt PartitionTerm) *exec.Cmd {
			cmd := exec.Command(self, append([]string{"run", "--partition-term=" + pt.String()}, args...)...)
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			// If the dispatcher dies its supervisors die at once, and with
			// them their children (their own Pdeathsig, and their
			// watchdogs).
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			return cmd
		},
		PollInterval:   o.PollInterval,
		StopGrace:      o.StopGrace,
		RestartBackoff: o.RestartBackoff,
		Signals:        signals,
		Stderr:         stderr,
	}
}

// config is the supervisor's Config for valid options.
func (o *Options) config(self string, signals <-chan os.Signal, stderr io.Writer) Config {
	base, _ := baseURL(o.URL, o.lookupEnv) // checked by Validate
	return Config{
		Command:         o.Command,
		API:             api.NewClient(base, &http.Client{Timeout: max(o.PollInterval, time.Second)}),
		LongPoll:        api.NewClient(base, &http.Client{Timeout: longPollWait + 5*time.Second}),
		PollInterval:    o.PollInterval,
		StopGrace:       o.StopGrace,
		StartDelay:      o.StartDelay,
		OnStartLeading:  o.OnStartLeading,
		OnStopLeading:   o.OnStopLeading,
		HookTimeout:     o.HookTimeout,
		OnExit:          o.OnExit,
		RestartBackoff:  o.RestartBackoff,
		WatchdogCommand: []string{self, WatchdogArg},
		Clock:           systemClock{},
		Signals:         signals,
		Stderr:          stderr,
	}
}

// baseURL is --url, else what the environment says (api.BaseURLFromEnv),
// as for leader-elector status; but only on a loopback host.
func baseURL(flagURL string, lookupEnv func(string) (string, bool)) (string, error) {
	name, base, err := "--url", "", error(nil)
	if flagURL != "" {
		base, err = api.ParseBaseURL(flagURL)
		if err != nil {
			return "", fmt.Errorf("--url %q: %w", flagURL, err)
		}
	} else {
		name = "the sidecar's URL from $" + api.EnvURL + " or $" + api.EnvHTTPAddress
		base, err = api.BaseURLFromEnv(lookupEnv)
		if err != nil {
			return "", fmt.Errorf("%w; give --url", err)
		}
	}
	// The sidecar of this pod only: the deadline arithmetic takes the
	// sidecar's claim as measured on this node, and a sidecar elsewhere
	// would run the child wherever that one leads.
	if !onLoopback(base) {
		return "", fmt.Errorf("%s %q: the host is not a loopback address; only 127.0.0.1, [::1] or localhost (the sidecar in the same pod) is allowed", name, base)
	}
	return base, nil
}

// onLoopback reports whether base's host is localhost or a loopback IP
// address without a zone (an IPv4-mapped one is refused too).
func onLoopback(base string) bool {
	// A host with a zone comes back unescaped from api.ParseBaseURL and
	// does not parse again: not a loopback host either way.
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	if host := u.Hostname(); host != "localhost" {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.IsLoopback() || ip.Is4In6() || ip.Zone() != "" {
			return false
		}
	}
	return true
}

// copySelf copies the running binary to dst, through a temporary file in
// the same directory renamed into place, so that a container never starts
// a half-written binary.
func copySelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".leader-elector-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}
