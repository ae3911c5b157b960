package app

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

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

func TestSetUpLoggingJSON(t *testing.T) {
	setVerbosity(t, "1")
	// The logger is global: put it back afterwards.
	t.Cleanup(klog.ClearLogger)
	var buf bytes.Buffer
	SetUpLogging("json", 1, &buf)
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

// TestSetUpLoggingText: the text format is klog's own, written by klog
// itself (to standard error), with the message and the key/values; nothing
// goes through the writer given for JSON.
func TestSetUpLoggingText(t *testing.T) {
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
	SetUpLogging("text", 0, &given)
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
