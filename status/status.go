// Package status is the `leader-elector status` subcommand: it asks the
// sidecar's application API on this pod, through package api's client, and
// prints who leads and this pod's part in a form for people (or the API's
// JSON with -o json). It runs where the sidecar runs — `kubectl exec -c
// leader-elector -- /leader-elector status` in the distroless image, which
// has no shell and no curl — or anywhere the API is reachable, such as
// through `kubectl port-forward`.
package status

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/internal/textline"
)

// Exit codes, as the sidecar's own (docs/api.md).
const (
	ExitOK = 0
	// ExitUnreachable: the API could not be asked or did not answer.
	ExitUnreachable = 1
	// ExitBadFlags: the command line is wrong.
	ExitBadFlags = 2
)

const defaultTimeout = 3 * time.Second

// Run runs `leader-elector status` with args (those after "status") and
// returns the exit code. lookupEnv reads the environment.
func Run(args []string, lookupEnv func(string) (string, bool), stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("leader-elector status", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.SortFlags = false
	rawURL := fs.String("url", "", "The application API to ask (default $"+api.EnvURL+", else http://<$"+api.EnvHTTPAddress+">, else "+api.DefaultBaseURL+").")
	output := fs.StringP("output", "o", "text", `Output format: "text" or "json" (the API's own answer).`)
	timeout := fs.Duration("timeout", defaultTimeout, "How long to wait for the answer.")
	err := fs.Parse(args)
	switch {
	case errors.Is(err, pflag.ErrHelp):
		fmt.Fprintf(stdout, "Usage: leader-elector status [flags]\n\nAsks the sidecar's application API who leads and prints this pod's part.\nExit codes: 0 answered, 1 the API could not be asked, 2 bad flags.\n\n%s", fs.FlagUsages())
		return ExitOK
	case err != nil:
		return badFlags(stderr, err.Error())
	case fs.NArg() > 0:
		return badFlags(stderr, "unexpected arguments: "+strings.Join(fs.Args(), " "))
	case *output != "text" && *output != "json":
		return badFlags(stderr, fmt.Sprintf("-o %q is unknown (want \"text\" or \"json\")", *output))
	case *timeout <= 0 || *timeout > time.Hour:
		return badFlags(stderr, fmt.Sprintf("--timeout %v is outside the supported range 1ns..1h", *timeout))
	}
	base, err := baseURL(*rawURL, lookupEnv)
	if err != nil {
		return badFlags(stderr, err.Error())
	}

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	client := api.NewClient(base, &http.Client{Timeout: *timeout})
	answer, err := ask(ctx, client)
	if err != nil {
		fmt.Fprintf(stderr, "leader-elector status: cannot get the status from %s: %s\n", base, textline.OneLine(err))
		return ExitUnreachable
	}
	if *output == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(answer); err != nil {
			fmt.Fprintf(stderr, "leader-elector status: %s\n", textline.OneLine(err))
			return ExitUnreachable
		}
		return ExitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	switch a := answer.(type) {
	case api.Leader:
		printLeader(tw, a, time.Now())
	case api.Partitions:
		printPartitions(tw, a, time.Now())
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "leader-elector status: %s\n", textline.OneLine(err))
		return ExitUnreachable
	}
	return ExitOK
}

func badFlags(stderr io.Writer, msg string) int {
	// One printable line whatever the arguments held, as the sidecar's own
	// refusals (textline.OneLine).
	fmt.Fprintf(stderr, "leader-elector status: %s\n", textline.OneLine(errors.New(msg)))
	return ExitBadFlags
}

// ask reads GET /leader; a sidecar in partition mode answers it 404, and
// GET /partitions instead.
func ask(ctx context.Context, c *api.Client) (any, error) {
	l, err := c.Leader(ctx)
	if err == nil {
		return l, nil
	}
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		return nil, err
	}
	p, perr := c.Partitions(ctx)
	if perr != nil {
		return nil, fmt.Errorf("%w; and %w", err, perr)
	}
	return p, nil
}

// baseURL is --url, else what the environment says (api.BaseURLFromEnv).
func baseURL(flagURL string, lookupEnv func(string) (string, bool)) (string, error) {
	if flagURL == "" {
		u, err := api.BaseURLFromEnv(lookupEnv)
		if err != nil {
			return "", fmt.Errorf("%w; give --url", err)
		}
		return u, nil
	}
	u, err := api.ParseBaseURL(flagURL)
	if err != nil {
		return "", fmt.Errorf("--url %q: %w", flagURL, err)
	}
	return u, nil
}

func printLeader(w io.Writer, l api.Leader, now time.Time) {
	role := "follower"
	if l.IsLeader {
		role = "leader"
	} else if l.Holder == l.Identity && l.Holder != "" {
		// The Lease still names this pod, but its claim has lapsed (it
		// could not renew in time, or it is releasing): it must not act.
		role = "follower (the Lease names this pod, but its claim has lapsed)"
	}
	holder := l.Holder
	if holder == "" {
		holder = "(none: no one holds the Lease)"
	}
	fmt.Fprintf(w, "Lease:\t%s/%s\n", l.Lease.Namespace, l.Lease.Name)
	fmt.Fprintf(w, "Leader:\t%s\n", holder)
	if l.HolderAddress != "" {
		fmt.Fprintf(w, "Leader address:\t%s\n", l.HolderAddress)
	}
	fmt.Fprintf(w, "This pod:\t%s (%s)\n", l.Identity, role)
	fmt.Fprintf(w, "Fencing token:\t%d\n", l.FencingToken)
	if l.IsLeader {
		fmt.Fprintf(w, "Valid until:\t%s\n", moment(l.ValidUntil, now))
		fmt.Fprintf(w, "Leader since:\t%s\n", moment(l.LeaderSince, now))
	}
	fmt.Fprintf(w, "Last renewal:\t%s\n", moment(l.RenewTime, now))
	fmt.Fprintf(w, "Lease duration:\t%ds\n", l.LeaseDurationSeconds)
	fmt.Fprintf(w, "Revision:\t%d\n", l.Revision)
}

func printPartitions(w io.Writer, p api.Partitions, now time.Time) {
	member := "member"
	if !p.Member {
		member = "not (yet) a member"
	}
	fmt.Fprintf(w, "Mode:\tpartitions\n")
	fmt.Fprintf(w, "Group:\t%s/%s\n", p.Lease.Namespace, p.Lease.Name)
	fmt.Fprintf(w, "This pod:\t%s (%s)\n", p.Identity, member)
	fmt.Fprintf(w, "Partitions:\t%d over %d members (fair share %d–%d)\n", p.Partitions, p.Members, p.FairShare.Min, p.FairShare.Max)
	fmt.Fprintf(w, "Owned:\t%d\n", len(p.Owned))
	for _, o := range p.Owned {
		fmt.Fprintf(w, "  partition %d:\ttoken %d, since %s, valid until %s\n", o.Partition, o.FencingToken, moment(o.Since, now), moment(o.ValidUntil, now))
	}
	fmt.Fprintf(w, "Revision:\t%d\n", p.Revision)
}

// moment prints t and how far it is from now, to the tenth of a second.
func moment(t api.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := t.Sub(now).Round(100 * time.Millisecond)
	rel := "now"
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format(time.RFC3339Nano) + " (" + rel + ")"
}
