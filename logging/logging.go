// Package logging sets up the process's logger for every command of the
// binary, the sidecar and leader-elector run alike: --log-format text (klog's
// own) or json (the Kubernetes JSON log format), at klog's -v. It is a leaf,
// the standard library and klog only, so that the supervisor can use it
// without linking anything else of Kubernetes.
package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
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

// k8sJSONHandler writes the Kubernetes JSON log format, as
// k8s.io/component-base/logs/json (zap) writes it for kube-apiserver and
// the other components:
//
//	{"ts":1765000000123.456,"logger":"events","caller":"election/elector.go:580","msg":"Stopped leading","v":0,"lease":{"name":"my-app","namespace":"default"},"reason":"shutdown","leaseDuration":"15s"}
//
// ts is milliseconds since the epoch as a float; v is the verbosity of an
// info line (error lines have none, and carry the error as "err");
// durations are strings ("1.5s"); the rest are the key/values in order.
// Time values are RFC 3339 strings (component-base's encoder writes the
// time of the log line instead, whatever the value).
//
// Hand-written on log/slog because component-base's logger costs ~1 MB of
// the stripped binary (zap, zapr, cobra, OpenTelemetry, feature gates) and
// moves client_golang to a newer release, against the image's size budget;
// the format itself is a few lines.
type k8sJSONHandler struct {
	out *lockedWriter
	v   int
	// prefix is the key/values added with WithAttrs, encoded, each
	// followed by a comma.
	prefix []byte
	// group is the dotted prefix of keys, from WithGroup (logr does not
	// use groups; slog users might).
	group string
}

// loggerKey is the attribute logr gives the logger's name under.
const loggerKey = "logger"

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newK8sJSONHandler(w io.Writer, v int) *k8sJSONHandler {
	return &k8sJSONHandler{out: &lockedWriter{w: w}, v: v}
}

// Enabled: errors always, info lines up to the verbosity (logr's V(n) is
// slog level -n).
func (h *k8sJSONHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelError || int(-level) <= h.v
}

func (h *k8sJSONHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	b.WriteString(`{"ts":`)
	b.WriteString(strconv.FormatFloat(float64(r.Time.UnixNano())/float64(time.Millisecond), 'f', -1, 64))
	// logr puts the logger's name (WithName) among the attributes; zap
	// writes it right after ts.
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == loggerKey && a.Value.Kind() == slog.KindString {
			b.WriteString(`,"logger":`)
			writeJSON(&b, a.Value.String())
			return false
		}
		return true
	})
	if r.PC != 0 {
		frame, _ := runtime.CallersFrames([]uintptr{r.PC}).Next()
		if frame.File != "" {
			// zap's short caller: the file's directory and name.
			b.WriteString(`,"caller":`)
			writeJSON(&b, filepath.Join(filepath.Base(filepath.Dir(frame.File)), filepath.Base(frame.File))+":"+strconv.Itoa(frame.Line))
		}
	}
	b.WriteString(`,"msg":`)
	writeJSON(&b, r.Message)
	if r.Level < slog.LevelError {
		b.WriteString(`,"v":`)
		b.WriteString(strconv.Itoa(max(int(-r.Level), 0)))
	}
	if len(h.prefix) > 0 {
		b.WriteByte(',')
		b.Write(bytes.TrimSuffix(h.prefix, []byte(",")))
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != loggerKey {
			appendAttr(&b, h.group, a)
		}
		return true
	})
	b.WriteString("}\n")
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := h.out.w.Write(b.Bytes())
	return err
}

func (h *k8sJSONHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b bytes.Buffer
	for _, a := range attrs {
		appendAttr(&b, h.group, a)
	}
	if b.Len() == 0 {
		return h
	}
	c := *h
	// appendAttr writes a leading comma: store each attribute followed by
	// one instead, so that the prefix can open the key/values.
	enc := bytes.TrimPrefix(b.Bytes(), []byte(","))
	c.prefix = append(append(append([]byte(nil), h.prefix...), enc...), ',')
	return &c
}

func (h *k8sJSONHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group += name + "."
	return &c
}

// appendAttr writes ,"key":value. A group with a key (klog.KObj's
// reference is one) is an object, as zap writes it; a group without one
// adds its attributes in place.
func appendAttr(b *bytes.Buffer, group string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup && a.Key == "" {
		for _, ga := range a.Value.Group() {
			appendAttr(b, group, ga)
		}
		return
	}
	b.WriteByte(',')
	writeJSON(b, group+a.Key)
	b.WriteByte(':')
	if a.Value.Kind() == slog.KindGroup {
		var inner bytes.Buffer
		for _, ga := range a.Value.Group() {
			appendAttr(&inner, "", ga)
		}
		b.WriteByte('{')
		b.Write(bytes.TrimPrefix(inner.Bytes(), []byte(",")))
		b.WriteByte('}')
		return
	}
	writeJSON(b, jsonValue(a.Value))
}

// jsonValue is what a value is written as: durations and errors as
// strings, times as RFC 3339, the rest as encoding/json writes them.
func jsonValue(v slog.Value) any {
	switch v.Kind() {
	case slog.KindDuration:
		return v.Duration().String()
	case slog.KindTime:
		return v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			return x.Error()
		case logr.Marshaler:
			return x.MarshalLog()
		}
	}
	return v.Any()
}

// writeJSON writes v as JSON, or its %+v as a string if it cannot be.
func writeJSON(b *bytes.Buffer, v any) {
	enc, err := json.Marshal(v)
	if err != nil {
		enc, _ = json.Marshal(fmt.Sprintf("%+v", v))
	}
	b.Write(enc)
}
