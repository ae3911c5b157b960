// Command exactlyonce runs the exactly-once worker of package exactlyonce
// next to a leader-elector sidecar in partition mode:
//
//	exactlyonce --sidecar=http://127.0.0.1:4040 --source=DIR --sink=http://sink:8080
//
// The sink is a server of exactlyonce.MemorySink.Handler (the e2e test
// runs one); a real worker would use its own store's conditional write.
//
// It stops on SIGTERM or SIGINT.
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
	if err := validate(fs, *sidecar, *source, *sink, *every, *poll); err != nil {
		fmt.Fprintln(os.Stderr, "exactlyonce:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	err := exactlyonce.Run(ctx, exactlyonce.Config{
		Sidecar:         api.NewClient(*sidecar, &http.Client{Timeout: 10 * time.Second}),
		Source:          *source,
		Sink:            exactlyonce.SinkClient{BaseURL: *sink, HTTP: &http.Client{Timeout: 10 * time.Second}},
		CheckpointEvery: *every,
		Poll:            *poll,
		Log:             log,
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

// validate refuses values outside their range, one line each.
func validate(fs *flag.FlagSet, sidecar, source, sink string, every int, poll time.Duration) error {
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
	return nil
}
