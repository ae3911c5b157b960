package app

import (
	"io"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// SetUpLogging selects the log format: "text" is klog's own, "json" one
// JSON object per line on w. Verbosity (-v) is klog's own flag and applies
// to both; v is its value.
func SetUpLogging(format string, v int, w io.Writer) {
	if format != "json" {
		return
	}
	handler := slog.NewJSONHandler(w, &slog.HandlerOptions{
		// logr maps V(n) to slog level -n.
		Level: slog.Level(-v),
	})
	klog.SetLogger(logr.FromSlogHandler(handler))
}
