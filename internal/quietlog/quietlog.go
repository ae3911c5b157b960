// Package quietlog demotes the error lines a library logs for outcomes its
// caller expects: a logr.Logger whose Error calls, for the errors a
// classifier accepts, become Info lines at a verbosity of the caller's
// choice. Package election uses it for client-go's elector.
package quietlog

import "github.com/go-logr/logr"

// New returns logger with the Error lines whose error expected accepts
// logged as Info at level (with the error under "err") instead. Every other
// line goes through unchanged, with the caller's file and line.
func New(logger logr.Logger, level int, expected func(error) bool) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	// One more frame (ours) between the caller and the sink: the line keeps
	// the caller's file and line.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logr.New(&quietSink{LogSink: sink, level: level, expected: expected})
}

type quietSink struct {
	logr.LogSink
	level    int
	expected func(error) bool
}

// with is s on another sink.
func (s *quietSink) with(sink logr.LogSink) *quietSink {
	return &quietSink{LogSink: sink, level: s.level, expected: s.expected}
}

// Init does nothing: the sink below was initialised with the logger it
// came from.
func (s *quietSink) Init(logr.RuntimeInfo) {}

func (s *quietSink) Error(err error, msg string, keysAndValues ...any) {
	if s.expected(err) {
		if s.LogSink.Enabled(s.level) {
			// A full slice expression: append copies, and never writes
			// into spare capacity of the caller's slice.
			kv := append(keysAndValues[:len(keysAndValues):len(keysAndValues)], "err", err)
			s.LogSink.Info(s.level, msg, kv...)
		}
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s *quietSink) WithValues(keysAndValues ...any) logr.LogSink {
	return s.with(s.LogSink.WithValues(keysAndValues...))
}

// WithCallDepth keeps logr's Logger.WithCallDepth working through the
// wrapper (without it, a helper's lines would name the helper).
func (s *quietSink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.LogSink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return s.with(cd.WithCallDepth(depth))
}

func (s *quietSink) WithName(name string) logr.LogSink {
	return s.with(s.LogSink.WithName(name))
}
