package app

import (
	"context"
	"io"
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/logging"
)

// Main sets the process up (the GC target, the logger in cfg's format,
// SIGTERM and SIGINT as the shutdown), runs cfg until a signal or an error,
// and flushes the log. The error, already logged, means exit code 1.
func Main(cfg Config, stderr io.Writer) error {
	SetGCPercent(os.LookupEnv, debug.SetGCPercent)
	logging.SetUp(cfg.LogFormat, cfg.Verbosity, stderr)
	logger := klog.Background().WithName("leader-elector")
	if cfg.LogNotices != nil {
		cfg.LogNotices(logger)
	}
	defer klog.Flush()

	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	stopSignals := ShutdownOnSignals(logger, cancel, make(chan os.Signal, 2))
	defer stopSignals()

	if err := Run(ctx, cfg); err != nil {
		logger.Error(err, "Exiting")
		return err
	}
	logger.Info("Stopped")
	return nil
}
