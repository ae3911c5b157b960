package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// sseReaderCommand runs the benchmark as the readers of attachSSE:
// `bench sse-reader URL N`.
const sseReaderCommand = "sse-reader"

// attachSSE starts a process of the benchmark's own that opens n /events
// streams on url and reads (and drops) everything they send, and returns
// once each has received its first event; the process is killed when ctx
// ends (or when the benchmark dies). The readers run in a process of
// their own so that their goroutines (three per stream, with net/http's
// client) are not scheduled with the benchmark's poller, which times the
// handovers: in one process, every change of state woke a thousand readers
// in the same process as the poller that measures the change.
func attachSSE(ctx context.Context, url string, n int) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("SSE readers: %w", err)
	}
	cmd := exec.CommandContext(ctx, self, sseReaderCommand, url, strconv.Itoa(n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("SSE readers: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("SSE readers: %w", err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	// Reaped once it ends: killed with ctx, or on its own after an error.
	go func() { _ = cmd.Wait() }()
	if line = strings.TrimSpace(line); line != "ready" {
		return fmt.Errorf("%d SSE readers on %s: %q (%v)", n, url, line, err)
	}
	return nil
}

// runSSEReaders is the readers' process: it prints "ready" once every
// stream has received its first event (or the error), then reads until it
// is killed.
func runSSEReaders(args []string) int {
	if len(args) != 2 {
		fmt.Fprintf(os.Stderr, "usage: bench %s URL N\n", sseReaderCommand)
		return 2
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "bench %s: invalid stream count %q\n", sseReaderCommand, args[1])
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if err := readSSE(ctx, args[0], n); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("ready")
	<-ctx.Done()
	return 0
}
