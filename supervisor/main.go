package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/api"
)

const usage = `Usage: leader-elector run [flags] -- CMD [ARGS...]

Runs CMD only while this pod leads, as told by the sidecar's application API,
and kills it no later than the moment the claim ends (docs/supervisor.md);
--on-start-leading / --on-stop-leading run a command on each transition.
Exit codes: the child's; 1 the supervisor failed; 2 bad flags, or
--stop-grace does not fit in the claim; 126 CMD cannot be executed; 127 CMD
not found.

`

// Main runs `leader-elector run` with args (those after "run") and returns
// the exit code. lookupEnv reads the environment.
func Main(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	flags := pflag.NewFlagSet("leader-elector run", pflag.ContinueOnError)
	flags.SetOutput(io.Discard)
	flags.SortFlags = false
	// Flags end at the first non-flag: everything after "--" is the
	// child's, however it looks.
	flags.SetInterspersed(false)
	rawURL := flags.String("url", "", "The sidecar's application API, on a loopback host (default $"+api.EnvURL+", else http://<$"+api.EnvHTTPAddress+">, else "+api.DefaultBaseURL+").")
	stopGrace := flags.Duration("stop-grace", 2*time.Second, "SIGTERM this long before the claim ends; SIGKILL at its end. Must be below the sidecar's --renew-deadline.")
	startDelay := flags.Duration("start-delay", 0, "Wait this long after this pod begins leading before starting the child, so that the previous leader's child has finished its --stop-grace after a release (default --stop-grace + 500ms; give the same --stop-grace on every pod).")
	onExit := flags.String("on-exit", OnExitRelease, `When the child exits by itself while leading: "release" (release leadership, exit with its code), "restart" (start it again, with back-off), "exit" (exit with its code).`)
	poll := flags.Duration("poll-interval", 200*time.Millisecond, "How often to read GET /leader while running: each read extends the deadline.")
	onStart := flags.String("on-start-leading", "", "A shell command (/bin/sh -c) to run when this pod's claim begins, with the child's environment; the command after -- is then optional.")
	onStop := flags.String("on-stop-leading", "", "A shell command to run when the claim ends (the sidecar says so, or it runs out unrenewed).")
	hookTimeout := flags.Duration("hook-timeout", 10*time.Second, "A hook still running after this long is killed with its process group.")
	copyTo := flags.String("copy-to", "", "Copy this binary to the given path (mode 0755) and exit: for an init container that puts it in a volume shared with the app's container (the image has no shell and no cp).")
	backoff := flags.Duration("restart-backoff", time.Second, "The first delay of --on-exit=restart; it doubles up to 30s while the child keeps exiting.")
	err := flags.Parse(args)
	bad := func(msg string) int {
		fmt.Fprintf(stderr, "leader-elector run: %s\n", strings.ReplaceAll(msg, "\n", " "))
		return ExitBadInput
	}
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "%s%s", usage, flags.FlagUsages())
		return 0
	case err != nil:
		return bad(err.Error())
	case *copyTo != "" && flags.NArg() > 0:
		return bad("--copy-to takes no command")
	case *copyTo != "":
		if err := copySelf(*copyTo); err != nil {
			fmt.Fprintf(stderr, "leader-elector run: --copy-to: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			return ExitRuntimeError
		}
		return 0
	case flags.NArg() > 0 && flags.ArgsLenAtDash() != 0:
		return bad("want the command after --: leader-elector run [flags] -- CMD [ARGS...]")
	case flags.NArg() == 0 && *onStart == "" && *onStop == "":
		return bad("want the command after -- (or a hook): leader-elector run [flags] -- CMD [ARGS...]")
	case *hookTimeout <= 0 || *hookTimeout > 10*time.Minute:
		return bad(fmt.Sprintf("--hook-timeout %v is outside the supported range 1ns..10m", *hookTimeout))
	case *stopGrace <= 0 || *stopGrace > 5*time.Minute:
		return bad(fmt.Sprintf("--stop-grace %v is outside the supported range 1ns..5m", *stopGrace))
	case *poll < 10*time.Millisecond || *poll > 5*time.Second:
		return bad(fmt.Sprintf("--poll-interval %v is outside the supported range 10ms..5s", *poll))
	case *backoff < 10*time.Millisecond || *backoff > maxRestartBackoff:
		return bad(fmt.Sprintf("--restart-backoff %v is outside the supported range 10ms..30s", *backoff))
	case *startDelay < 0 || *startDelay > 5*time.Minute:
		return bad(fmt.Sprintf("--start-delay %v is outside the supported range 0..5m", *startDelay))
	case *onExit != OnExitRelease && *onExit != OnExitRestart && *onExit != OnExitExit:
		return bad(fmt.Sprintf("--on-exit %q is unknown (want release, restart or exit)", *onExit))
	}
	if !flags.Changed("start-delay") {
		*startDelay = *stopGrace + 500*time.Millisecond
	}
	base, err := baseURL(*rawURL, lookupEnv)
	if err != nil {
		return bad(err.Error())
	}
	command := flags.Args()
	// Fail before waiting for leadership, as a shell would.
	if len(command) > 0 {
		if _, err := exec.LookPath(command[0]); err != nil {
			code := ExitCannotExecute
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				code = ExitNotFound
			}
			fmt.Fprintf(stderr, "leader-elector run: cannot execute %q: %v (exit code %d)\n", command[0], err, code)
			return code
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector run: cannot find its own binary for the watchdog: %v\n", err)
		return ExitRuntimeError
	}

	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(signals)
	return Run(context.Background(), Config{
		Command:         command,
		API:             api.NewClient(base, &http.Client{Timeout: max(*poll, time.Second)}),
		LongPoll:        api.NewClient(base, &http.Client{Timeout: longPollWait + 5*time.Second}),
		PollInterval:    *poll,
		StopGrace:       *stopGrace,
		StartDelay:      *startDelay,
		OnStartLeading:  *onStart,
		OnStopLeading:   *onStop,
		HookTimeout:     *hookTimeout,
		OnExit:          *onExit,
		RestartBackoff:  *backoff,
		WatchdogCommand: []string{self, WatchdogArg},
		Clock:           systemClock{},
		Signals:         signals,
		Stderr:          stderr,
	})
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
