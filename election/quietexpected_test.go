package election

import (
	"context"
	"errors"
	"log/slog"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

func TestQuietExpected(t *testing.T) {
	cancelled := &url.Error{Op: "Get", URL: "https://apiserver/lease", Err: context.Canceled}
	other := errors.New("the server is currently unable to handle the request")
	for _, tc := range []struct {
		name    string
		stopped bool
		err     error
		want    string // what the line holds; "level"=2: logged as info
	}{
		{"a request cut short by the stop is not an error", true, cancelled, `"level"=2 "msg"="Error retrieving lease lock"`},
		{"a cancelled request while the round runs is", false, cancelled, `"msg"="Error retrieving lease lock" "error"=`},
		{"any other error is, stopped or not", true, other, `"msg"="Error retrieving lease lock" "error"=`},
		{"a refusal of the gate is not", false, errNotAdmitted, `"level"=2 "msg"="Error retrieving lease lock"`},
		{"nor a Lease created without a holder", false, errCreatedWithoutHolder, `"level"=2 "msg"="Error retrieving lease lock"`},
		{"nor a holder that renewed", false, errNotExpired, `"level"=2 "msg"="Error retrieving lease lock"`},
		{"a lapsed claim is", false, errClaimLapsed, `"msg"="Error retrieving lease lock" "error"=`},
		{"a race to take the Lease, lost, is not", false, lostRace(apierrors.NewConflict(leasesResource, testName, errors.New("changed"))), `"level"=2 "msg"="Error retrieving lease lock"`},
		{"a conflict on a renewal is", false, apierrors.NewConflict(leasesResource, testName, errors.New("changed")), `"msg"="Error retrieving lease lock" "error"=`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, verbosity := range []int{0, expectedLevel} {
				var lines []string
				base := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: verbosity, LogCaller: funcr.All})
				logger := quietExpected(base.WithName("elector"), func() bool { return tc.stopped }).WithValues("lease", "ns/name")
				logger.Error(tc.err, "Error retrieving lease lock")

				demoted := strings.Contains(tc.want, `"level"=2`)
				if demoted && verbosity < expectedLevel {
					if len(lines) != 0 {
						t.Fatalf("verbosity %d: logged %q, want nothing", verbosity, lines)
					}
					continue
				}
				if len(lines) != 1 {
					t.Fatalf("verbosity %d: %d lines %q, want 1", verbosity, len(lines), lines)
				}
				line := lines[0]
				// The caller is this test, not the wrapper.
				if !strings.Contains(line, `"file"="quietexpected_test.go"`) {
					t.Errorf("verbosity %d: caller not kept: %s", verbosity, line)
				}
				if !strings.Contains(line, tc.want) || !strings.Contains(line, `"lease"="ns/name"`) || !strings.Contains(line, strings.ReplaceAll(tc.err.Error(), `"`, `\"`)) {
					t.Errorf("verbosity %d: got %s\nwant it to contain %s, the lease and the error", verbosity, line, tc.want)
				}
			}
		})
	}
}

// TestQuietExpectedSlog: the JSON log format's sink (logr over a slog
// handler, app/logging.go) keeps the caller too, and gets the demoted line
// as info.
func TestQuietExpectedSlog(t *testing.T) {
	var out strings.Builder
	handler := slog.NewJSONHandler(&out, &slog.HandlerOptions{AddSource: true, Level: slog.Level(-expectedLevel)})
	logger := quietExpected(logr.FromSlogHandler(handler), func() bool { return true })
	logger.Error(errNotAdmitted, "Failed to update lease")
	line := out.String()
	if !strings.Contains(line, `"level":"DEBUG+2"`) || !strings.Contains(line, `quietexpected_test.go`) {
		t.Errorf("got %s, want an info line at verbosity %d from this file", line, expectedLevel)
	}
}

// TestQuietExpectedCallDepth: a helper that logs with WithCallDepth(1)
// names its caller's line through the wrapper, as it would without it.
func TestQuietExpectedCallDepth(t *testing.T) {
	var line string
	base := funcr.New(func(_, args string) { line = args }, funcr.Options{LogCaller: funcr.All})
	logger := quietExpected(base, func() bool { return false })
	helper := func(l logr.Logger) { l.WithCallDepth(1).Error(errClaimLapsed, "Failed to update lease") }
	_, _, callerLine, _ := runtime.Caller(0)
	helper(logger) // the line after runtime.Caller's
	if want := `"line"=` + strconv.Itoa(callerLine+1); !strings.Contains(line, want) {
		t.Errorf("got %s, want the helper's caller (%s)", line, want)
	}
}

// TestQuietExpectedKeepsCallersValues: demoting a line adds the error to
// the key/values without writing into the caller's slice.
func TestQuietExpectedKeepsCallersValues(t *testing.T) {
	base := funcr.New(func(_, _ string) {}, funcr.Options{Verbosity: expectedLevel})
	logger := quietExpected(base, func() bool { return false })
	kv := make([]any, 2, 4)
	kv[0], kv[1] = "lease", "ns/name"
	logger.Error(errNotAdmitted, "Failed to update lease", kv...)
	if spare := kv[:4]; spare[2] != nil || spare[3] != nil {
		t.Errorf("the caller's slice was written past its length: %v", spare)
	}
}
