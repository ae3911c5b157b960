package app

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/textlogger"
)

// TestShutdownOnSignals: the first SIGTERM cancels the context; once
// stopped, the relay receives no more signals (signal.Stop), so they get
// their default action back.
func TestShutdownOnSignals(t *testing.T) {
	self, err := os.FindProcess(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The test's own channel stays registered while it sends itself
	// SIGTERM, so that the signal never ends the test process, and tells it
	// when the signal has been delivered.
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGTERM)
	defer signal.Stop(caught)
	sendSIGTERM := func() {
		t.Helper()
		if err := self.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-caught:
		case <-time.After(wait.ForeverTestTimeout):
			t.Fatal("SIGTERM not delivered")
		}
	}

	var logged bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logged)))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	stop := ShutdownOnSignals(logger, cancel, sigs)

	sendSIGTERM()
	select {
	case <-ctx.Done():
	case <-time.After(wait.ForeverTestTimeout):
		t.Fatal("SIGTERM did not cancel the context")
	}
	if !strings.Contains(logged.String(), `"Shutting down" signal="terminated"`) {
		t.Errorf("logged %q, want the shutdown with its signal", logged.String())
	}

	stop()
	sendSIGTERM()
	// os/signal hands a signal to every registered channel in one go, under
	// the lock that Stop takes: once Stop returns, the signal has reached
	// sigs too if sigs was still registered.
	signal.Stop(caught)
	if len(sigs) != 0 {
		t.Errorf("a SIGTERM reached the relay after stop: it still holds the signals")
	}
}
