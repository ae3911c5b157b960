package election

import (
	"context"
	"errors"

	"github.com/go-logr/logr"

	"github.com/leader-elector/leader-elector/internal/quietlog"
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
	return quietlog.New(logger, expectedLevel, func(err error) bool {
		switch {
		case errors.Is(err, errNotAdmitted), errors.Is(err, errNotExpired), errors.Is(err, errCreatedWithoutHolder), errors.Is(err, errLostRace):
			return true
		case errors.Is(err, context.Canceled):
			return stopped()
		}
		return false
	})
}
