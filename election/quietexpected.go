package election

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
)

// expectedLevel is the verbosity at which client-go's error lines for
// expected outcomes are logged.
const expectedLevel = 2

// quietExpected returns a logger for client-go's elector that logs, at
// expectedLevel instead of as errors, the failed Lease requests that are
// outcomes this elector chose or expects. client-go logs every failed read
// or write of the Lease at error level ("Error retrieving lease lock",
// "Error initially creating lease lock", "Failed to update lease", …),
// which includes:
//   - a request cut short by the elector's own stop (a cancelled context
//     once stopped tells so): at shutdown, at a release, and in partition
//     mode whenever a partition's elector stops because its pod no longer
//     wants it — thousands of lines while a large group settles;
//   - this package's own refusals of a write (the gate or a campaign does
//     not admit a new term, the holder renewed within the lease duration,
//     a missing Lease created without a holder);
//   - a race to take the Lease lost to another candidate (errLostRace):
//     at every change of leader, all candidates but one lose it.
//
// Every other line, and every other error (a conflict on a renewal of this
// pod's own term, the API server refusing or failing), goes through
// unchanged.
func quietExpected(logger logr.Logger, stopped func() bool) logr.Logger {
	sink := logger.GetSink()
	if sink == nil {
		return logger
	}
	// One more frame (ours) between the caller and the sink: the line keeps
	// client-go's file and line.
	if cd, ok := sink.(logr.CallDepthLogSink); ok {
		sink = cd.WithCallDepth(1)
	}
	return logr.New(&quietSink{LogSink: sink, stopped: stopped})
}

type quietSink struct {
	logr.LogSink
	stopped func() bool
}

// expected reports whether err is an outcome quietExpected logs as info.
func (s *quietSink) expected(err error) bool {
	switch {
	case errors.Is(err, errNotAdmitted), errors.Is(err, errNotExpired), errors.Is(err, errCreatedWithoutHolder), errors.Is(err, errLostRace):
		return true
	case errors.Is(err, context.Canceled):
		return s.stopped()
	}
	return false
}

// Init does nothing: the sink below was initialised with the logger it
// came from.
func (s *quietSink) Init(logr.RuntimeInfo) {}

func (s *quietSink) Error(err error, msg string, keysAndValues ...any) {
	if s.expected(err) {
		if s.LogSink.Enabled(expectedLevel) {
			// A full slice expression: append copies, and never writes
			// into spare capacity of the caller's slice.
			kv := append(keysAndValues[:len(keysAndValues):len(keysAndValues)], "err", err)
			s.LogSink.Info(expectedLevel, msg, kv...)
		}
		return
	}
	s.LogSink.Error(err, msg, keysAndValues...)
}

func (s *quietSink) WithValues(keysAndValues ...any) logr.LogSink {
	return &quietSink{LogSink: s.LogSink.WithValues(keysAndValues...), stopped: s.stopped}
}

// WithCallDepth keeps logr's Logger.WithCallDepth working through the
// wrapper (without it, a helper's lines would name the helper).
func (s *quietSink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.LogSink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &quietSink{LogSink: cd.WithCallDepth(depth), stopped: s.stopped}
}

func (s *quietSink) WithName(name string) logr.LogSink {
	return &quietSink{LogSink: s.LogSink.WithName(name), stopped: s.stopped}
}
