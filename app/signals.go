package app

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"
)

// ExitAtOnce is the exit code of a second SIGTERM or SIGINT.
const ExitAtOnce = 1

// ShutdownOnSignals cancels on the first SIGTERM or SIGINT and exits at
// once on the second, until stop is called: then the signals get their
// default action back and the goroutine that waits for them ends. sigs is a
// parameter so that a test can see that no signal reaches it after stop.
func ShutdownOnSignals(logger klog.Logger, cancel context.CancelFunc, sigs chan os.Signal) (stop func()) {
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	stopped := make(chan struct{})
	go func() {
		var sig os.Signal
		select {
		case sig = <-sigs:
		case <-stopped:
			return
		}
		logger.Info("Shutting down", "signal", sig.String())
		cancel()
		select {
		case sig = <-sigs:
		case <-stopped:
			return
		}
		logger.Info("Second signal, exiting at once", "signal", sig.String())
		klog.Flush()
		os.Exit(ExitAtOnce)
	}()
	return func() {
		signal.Stop(sigs)
		close(stopped)
	}
}
