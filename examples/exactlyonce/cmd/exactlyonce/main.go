// Command exactlyonce runs the exactly-once worker of package exactlyonce
// next to a leader-elector sidecar in partition mode:
//
//	exactlyonce --sidecar=http://127.0.0.1:4040 --source=DIR --sink=http://sink:8080
//
// The sink is a server of exactlyonce.MemorySink.Handler (the e2e test
// runs one); a real worker would use its own store's conditional write.
//
// It stops on SIGTERM or SIGINT.
//
// With --supervised it is one partition's child of `leader-elector run
// --partitions` instead (docs/supervisor.md, "Partition mode"):
//
//	leader-elector run --partitions -- exactlyonce --supervised --source=DIR --sink=URL
//
// It processes $LEADER_ELECTOR_PARTITION under $LEADER_ELECTOR_FENCING_TOKEN,
// and SIGTERM (a drain, or the pod's end) stores a final checkpoint and
// exits 0; the supervisor then hands the partition over.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/examples/exactlyonce"
)

func main() {
	fs := flag.NewFlagSet("exactlyonce", flag.ContinueOnError)
	sidecar := fs.String("sidecar", "http://127.0.0.1:4040", "the sidecar's application API")
	source := fs.String("source", "", "the directory of the partitions' streams (required)")
	sink := fs.String("sink", "", "the URL of the fenced sink (required)")
	every := fs.Int("checkpoint-every", 10, "checkpoint after this many applied items (1-1000000)")
	poll := fs.Duration("poll", 20*time.Millisecond, "how often the end of a stream is read again (1ms-10s)")
	supervised := fs.Bool("supervised", false, "process only $LEADER_ELECTOR_PARTITION under $LEADER_ELECTOR_FENCING_TOKEN, as a child of leader-elector run --partitions; SIGTERM drains")
	itemDelay := fs.Duration("item-delay", 0, "time each item's processing takes, a stand-in for real work (0-1s)")
	// One line for a bad flag, as for a bad value; the usage only on -h.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(os.Stderr)
			fs.PrintDefaults()
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(2)
	}
	if err := validate(fs, *sidecar, *source, *sink, *every, *poll, *itemDelay); err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(2)
	}
	var partition int
	var token int64
	if *supervised {
		var err error
		if partition, token, err = supervisedTerm(); err != nil {
			fmt.Fprintln(os.Stderr, "exactlyonce:", err)
			os.Exit(2)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c := exactlyonce.Config{
		Sidecar:         api.NewClient(*sidecar, &http.Client{Timeout: 10 * time.Second}),
		Source:          *source,
		Sink:            exactlyonce.SinkClient{BaseURL: *sink, HTTP: &http.Client{Timeout: 10 * time.Second}},
		CheckpointEvery: *every,
		Poll:            *poll,
		Log:             log,
	}
	if d := *itemDelay; d > 0 {
		c.Process = func(_ int, _ int64, item string) string {
			time.Sleep(d)
			return item
		}
	}
	var err error
	if *supervised {
		// SIGTERM drains (a final checkpoint, then exit); SIGINT stops at
		// once.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT)
		defer stop()
		drain := make(chan struct{})
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		go func() { <-term; close(drain) }()
		err = exactlyonce.RunPartition(ctx, c, partition, token, drain)
	} else {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = exactlyonce.Run(ctx, c)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

// validate refuses values outside their range, one line each.
func validate(fs *flag.FlagSet, sidecar, source, sink string, every int, poll, itemDelay time.Duration) error {
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for name, v := range map[string]string{"sidecar": sidecar, "sink": sink} {
		if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--%s=%q is not an http(s) URL", name, v)
		}
	}
	if source == "" {
		return errors.New("--source is required")
	}
	if every < 1 || every > 1000000 {
		return fmt.Errorf("--checkpoint-every=%d is outside 1-1000000", every)
	}
	if poll < time.Millisecond || poll > 10*time.Second {
		return fmt.Errorf("--poll=%v is outside 1ms-10s", poll)
	}
	if itemDelay < 0 || itemDelay > time.Second {
		return fmt.Errorf("--item-delay=%v is outside 0-1s", itemDelay)
	}
	return nil
}

// supervisedTerm reads the partition and the fencing token `leader-elector
// run --partitions` gives its child.
func supervisedTerm() (int, int64, error) {
	p, err := strconv.Atoi(os.Getenv("LEADER_ELECTOR_PARTITION"))
	if err != nil || p < 0 {
		return 0, 0, fmt.Errorf("--supervised: LEADER_ELECTOR_PARTITION=%q is not a partition number (start it with leader-elector run --partitions)", os.Getenv("LEADER_ELECTOR_PARTITION"))
	}
	token, err := strconv.ParseInt(os.Getenv("LEADER_ELECTOR_FENCING_TOKEN"), 10, 64)
	if err != nil || token < 0 {
		return 0, 0, fmt.Errorf("--supervised: LEADER_ELECTOR_FENCING_TOKEN=%q is not a fencing token", os.Getenv("LEADER_ELECTOR_FENCING_TOKEN"))
	}
	return p, token, nil
}
