// Package logging sets up the process's logger for every command of the
// binary, the sidecar and leader-elector run alike: --log-format text (klog's
// own) or json (the Kubernetes JSON log format), at klog's -v. It is a leaf,
// the standard library and klog only, so that the supervisor can use it
// without linking anything else of Kubernetes.
package logging

import (
	"flag"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// The log formats: --log-format's values.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// ValidFormat reports whether format is one of the log formats.
func ValidFormat(format string) bool { return format == FormatText || format == FormatJSON }

// SetUp selects the log format: "text" is klog's own, "json" one JSON
// object per line on w in the Kubernetes JSON log format (see
// newK8sJSONHandler). Verbosity (-v) is klog's own flag and applies to
// both; v is its value.
func SetUp(format string, v int, w io.Writer) {
	if format != FormatJSON {
		return
	}
	klog.SetLogger(logr.FromSlogHandler(newK8sJSONHandler(w, v)))
}

// VerbosityFlag is klog's -v, to add to a command's flag set: parsing it
// sets klog's verbosity, the one global the process keeps.
func VerbosityFlag() *flag.Flag {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	return fs.Lookup("v")
}

// newK8sJSONHandler writes the Kubernetes JSON log format, as
// k8s.io/component-base/logs/json (zap) writes it for kube-apiserver and
// the other components, one object per line:
//
//	{"ts":1765000000123.456,"v":0,"caller":"election/elector.go:580","msg":"Stopped leading","logger":"events","lease":{"name":"my-app","namespace":"default"},"reason":"shutdown","leaseDuration":"15s"}
//
// ts is milliseconds since the epoch as a float; v is the verbosity of an
// info line (error lines have none, and carry the error as "err"); caller
// the file's directory and name; durations are strings ("1.5s"); the rest
// are the key/values in order. The fields are zap's; their order is
// slog's (ts, v, caller, msg, then the rest), which JSON readers ignore.
//
// log/slog's JSONHandler with a ReplaceAttr hook, not component-base's
// logger, which costs ~1 MB of the stripped binary (zap, zapr, cobra,
// OpenTelemetry, feature gates) and moves client_golang to a newer release,
// against the image's size budget.
func newK8sJSONHandler(w io.Writer, v int) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{
		AddSource: true,
		// logr's V(n) is slog level -n; errors are always logged.
		Level:       slog.Level(-v),
		ReplaceAttr: k8sAttr,
	})
}

// k8sAttr renames slog's built-in fields to the Kubernetes ones and writes
// values as zap does.
func k8sAttr(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 {
		switch a.Key {
		case slog.TimeKey:
			return slog.Float64("ts", float64(a.Value.Time().UnixNano())/float64(time.Millisecond))
		case slog.LevelKey:
			level, _ := a.Value.Any().(slog.Level)
			if level >= slog.LevelError {
				return slog.Attr{}
			}
			return slog.Int("v", max(int(-level), 0))
		case slog.SourceKey:
			src, ok := a.Value.Any().(*slog.Source)
			if !ok || src.File == "" {
				return slog.Attr{}
			}
			return slog.String("caller", filepath.Join(filepath.Base(filepath.Dir(src.File)), filepath.Base(src.File))+":"+strconv.Itoa(src.Line))
		}
	}
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
		if m, ok := a.Value.Any().(logr.Marshaler); ok {
			return slog.Any(a.Key, m.MarshalLog())
		}
	}
	return a
}
