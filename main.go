// Command leader-elector is a Kubernetes sidecar for leader election. It
// takes part in the election for a coordination.k8s.io/v1 Lease and tells the
// application next to it, over localhost HTTP, who leads and whether it is
// this pod; its readiness probe passes only on the leader.
//
// main only wires the steps together: parse (package options), run with
// the process's logging and signals (app.Main), exit code; `leader-elector status` is
// package status, `leader-elector run -- CMD` package supervisor.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/leader-elector/leader-elector/app"
	"github.com/leader-elector/leader-elector/internal/textline"
	"github.com/leader-elector/leader-elector/options"
	"github.com/leader-elector/leader-elector/status"
	"github.com/leader-elector/leader-elector/supervisor"
)

// version and revision (the commit, where Go cannot stamp it: the image is
// built without .git) are set at build time with -ldflags "-X main.version=…
// -X main.revision=…"; an empty revision means the one Go stamped, if any.
var version, revision = "dev", ""

// Exit codes of the contract (docs/api.md).
const (
	exitOK           = 0
	exitRuntimeError = 1
	exitInvalidInput = 2
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// execute parses the configuration, runs until a signal, and returns the
// process's exit code.
func execute(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "status":
			return status.Run(args[1:], os.LookupEnv, stdout, stderr)
		case "run":
			return supervisor.Main(args[1:], os.LookupEnv, stdout, stderr)
		case supervisor.WatchdogArg:
			return supervisor.RunWatchdog(args[1:], os.Stdin, stdout, stderr)
		}
	}
	opts, err := options.Parse(args, options.OSEnvironment)
	switch {
	case errors.Is(err, options.ErrHelp):
		fmt.Fprint(stdout, options.Usage())
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "leader-elector: invalid configuration: %s\n", textline.OneLine(err))
		return exitInvalidInput
	case opts.Version:
		fmt.Fprintf(stdout, "leader-elector %s\n", version)
		return exitOK
	}

	if err := app.Main(opts.AppConfig(version, revision), stderr); err != nil {
		return exitRuntimeError
	}
	return exitOK
}
