package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
)

// setVerbosity sets klog's global -v for the test and puts it back after.
func setVerbosity(t *testing.T, v string) {
	t.Helper()
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	old := fs.Lookup("v").Value.String()
	if err := fs.Set("v", v); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fs.Set("v", old); err != nil {
			t.Errorf("resetting -v: %v", err)
		}
	})
}

func TestSetUpJSON(t *testing.T) {
	setVerbosity(t, "1")
	// The logger is global: put it back afterwards.
	t.Cleanup(klog.ClearLogger)
	var buf bytes.Buffer
	SetUp("json", 1, &buf)
	logger := klog.Background()
	logger.Info("Shown", "key", "value")
	logger.V(1).Info("Also shown")
	logger.V(2).Info("Hidden")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("not JSON: %q: %v", lines[0], err)
	}
	if first["msg"] != "Shown" || first["key"] != "value" {
		t.Errorf("first line = %v", first)
	}
}

// TestSetUpLoggingJSONSchema: the lines have the Kubernetes JSON log
// format's fields and types, as k8s.io/component-base/logs/json writes
// them: ts (float milliseconds since the epoch), caller, msg, v on info
// lines (the verbosity, a number), err on error lines, durations as
// strings, names under "logger", key/values in order.
func TestSetUpJSONSchema(t *testing.T) {
	setVerbosity(t, "2")
	t.Cleanup(klog.ClearLogger)
	var buf bytes.Buffer
	SetUp("json", 2, &buf)
	before := float64(time.Now().UnixNano()) / 1e6
	logger := klog.Background().WithName("election").WithValues("lease", klog.KRef("ns", "my-app"))
	logger.Info("Became leader", "reason", "acquired", "leaseDuration", 1500*time.Millisecond)
	logger.V(2).Info("Observed new holder", "holder", "pod-b")
	logger.Error(errors.New("boom"), "Failed", "attempts", 3)
	after := float64(time.Now().UnixNano()) / 1e6
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %d lines, want 3:\n%s", len(lines), buf.String())
	}
	var got []map[string]any
	for _, line := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		ts, ok := m["ts"].(float64)
		if !ok || ts < before || ts > after {
			t.Errorf("ts = %v, want milliseconds since the epoch between %f and %f", m["ts"], before, after)
		}
		if caller, _ := m["caller"].(string); !regexp.MustCompile(`^logging/logging_test\.go:\d+$`).MatchString(caller) {
			t.Errorf("caller = %v, want logging/logging_test.go:<line>", m["caller"])
		}
		if m["logger"] != "election" {
			t.Errorf("logger = %v, want election", m["logger"])
		}
		if lease, _ := m["lease"].(map[string]any); lease["name"] != "my-app" || lease["namespace"] != "ns" {
			t.Errorf("lease = %v, want name and namespace", m["lease"])
		}
		got = append(got, m)
	}
	if got[0]["msg"] != "Became leader" || got[0]["v"] != float64(0) || got[0]["reason"] != "acquired" || got[0]["leaseDuration"] != "1.5s" {
		t.Errorf("info line = %s, want msg, v 0, reason and leaseDuration \"1.5s\"", lines[0])
	}
	if got[1]["v"] != float64(2) || got[1]["holder"] != "pod-b" {
		t.Errorf("-v=2 line = %s, want v 2", lines[1])
	}
	if _, hasV := got[2]["v"]; hasV || got[2]["err"] != "boom" || got[2]["msg"] != "Failed" || got[2]["attempts"] != float64(3) {
		t.Errorf("error line = %s, want err \"boom\", no v", lines[2])
	}
	// Key order: slog's built-in fields first (ts, v, caller, msg), then
	// the logger's name and the key/values in order.
	if !regexp.MustCompile(`^\{"ts":[0-9.]+,"v":0,"caller":"[^"]+","msg":"Became leader","logger":"election","lease":\{`).MatchString(lines[0]) {
		t.Errorf("line does not start ts, v, caller, msg, logger, key/values: %s", lines[0])
	}
}

// TestSetUpLoggingText: the text format is klog's own, written by klog
// itself (to standard error), with the message and the key/values; nothing
// goes through the writer given for JSON.
func TestSetUpText(t *testing.T) {
	// klog writes straight to os.Stderr while it logs to standard error
	// only: have it write to its outputs instead, and capture them.
	var klogOutput, given bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&klogOutput)
	t.Cleanup(func() {
		klog.ClearLogger()
		klog.LogToStderr(true)
		klog.SetOutput(os.Stderr)
	})
	SetUp("text", 0, &given)
	klog.Background().Info("Shown", "key", "value")
	klog.Flush()
	// Like I1129 08:00:00.000000   12345 logging_test.go:42] "Shown" key="value".
	klogLine := regexp.MustCompile(`^I\d{4} \d{2}:\d{2}:\d{2}\.\d{6} +\d+ logging_test\.go:\d+\] "Shown" key="value"$`)
	if line := strings.TrimSuffix(klogOutput.String(), "\n"); !klogLine.MatchString(line) {
		t.Errorf("text logging wrote %q, want one line in klog's format matching %s", klogOutput.String(), klogLine)
	}
	if given.Len() != 0 {
		t.Errorf("text logging wrote %q to the writer given for JSON", given.String())
	}
}
