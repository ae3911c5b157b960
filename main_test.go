package main

import (
	"bytes"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leader-elector/leader-elector/internal/textline"
	"github.com/leader-elector/leader-elector/options"
)

// The tests of main: what reaches the user (exit codes, stdout, stderr)
// for each kind of outcome. The options and the run are tested in their
// packages.

func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		env        map[string]string
		wantCode   int
		wantStdout string // prefix
		wantStderr []string
	}{
		{
			name:       "version",
			args:       []string{"--version"},
			wantCode:   0,
			wantStdout: "leader-elector dev\n",
		},
		{
			name:       "help",
			args:       []string{"--help"},
			wantCode:   0,
			wantStdout: "Usage:\n  leader-elector [flags]",
		},
		{
			name:       "-h",
			args:       []string{"-h"},
			wantCode:   0,
			wantStdout: "Usage:\n  leader-elector [flags]",
		},
		{
			name:       "misspelt subcommand",
			args:       []string{"stauts"},
			wantCode:   2,
			wantStderr: []string{`unknown command "stauts" (did you mean "status"?)`},
		},
		{
			name:       "unknown flag",
			args:       []string{"--lease-name=my-app", "--bogus"},
			wantCode:   2,
			wantStderr: []string{"unknown flag: --bogus"},
		},
		{
			name:       "several invalid options",
			args:       []string{"--lease-name=My_App", "--lease-duration=1500ms", "--readiness=sometimes"},
			wantCode:   2,
			wantStderr: []string{"DNS-1123", "whole number", `--readiness "sometimes"`},
		},
		{
			name:       "argument with a newline",
			args:       []string{"--lease-name=my-app", "one\ntwo"},
			wantCode:   2,
			wantStderr: []string{"unexpected arguments: one"},
		},
		{
			name:       "invalid environment variable",
			args:       []string{"--lease-name=my-app"},
			env:        map[string]string{"LEADER_ELECTOR_RETRY_PERIOD": "often"},
			wantCode:   2,
			wantStderr: []string{"LEADER_ELECTOR_RETRY_PERIOD"},
		},
		{
			name:       "durations out of order",
			args:       []string{"--lease-name=my-app", "--lease-duration=5s"},
			wantCode:   2,
			wantStderr: []string{"--lease-duration (5s) must be greater than --renew-deadline (10s)"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := execute(tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tc.wantCode, stderr.String())
			}
			if tc.wantCode == 0 {
				if !strings.HasPrefix(stdout.String(), tc.wantStdout) {
					t.Errorf("stdout = %q, want it to start with %q", stdout.String(), tc.wantStdout)
				}
				if stderr.Len() != 0 {
					t.Errorf("stderr = %q, want nothing", stderr.String())
				}
				if tc.wantStdout == "Usage:\n  leader-elector [flags]" {
					for _, flag := range []string{"--lease-name", "--lease-namespace", "--identity", "--release-on-shutdown", "--version", "-v, --v"} {
						if !strings.Contains(stdout.String(), flag) {
							t.Errorf("usage does not mention %s", flag)
						}
					}
					for _, alias := range []string{"--election", "--id "} {
						if strings.Contains(stdout.String(), alias) {
							t.Errorf("usage lists the deprecated %s", alias)
						}
					}
				}
				return
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout = %q, want nothing", stdout.String())
			}
			got := stderr.String()
			if n := strings.Count(got, "\n"); n != 1 || !strings.HasSuffix(got, "\n") {
				t.Errorf("stderr has %d newlines, want exactly one line: %q", n, got)
			}
			if !strings.HasPrefix(got, "leader-elector: invalid configuration: ") {
				t.Errorf("stderr = %q, want the invalid configuration prefix", got)
			}
			for _, want := range tc.wantStderr {
				if !strings.Contains(got, want) {
					t.Errorf("stderr %q does not contain %q", got, want)
				}
			}
		})
	}
}

// TestExecuteRuntimeErrors: a configuration that passes validation but
// cannot run exits 1.
func TestExecuteRuntimeErrors(t *testing.T) {
	const kubeconfig = "app/testdata/unreachable.kubeconfig"
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{name: "no usable client configuration", args: []string{"--kubeconfig=" + filepath.Join(t.TempDir(), "missing")}},
		{name: "application API address in use", args: []string{"--kubeconfig=" + kubeconfig, "--http-address=" + busy.Addr().String(), "--probe-address=127.0.0.1:0"}},
		{name: "probe address in use", args: []string{"--kubeconfig=" + kubeconfig, "--http-address=127.0.0.1:0", "--probe-address=" + busy.Addr().String()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--lease-name=my-app", "--lease-namespace=default", "--identity=pod-a"}, tc.args...)
			var stdout, stderr bytes.Buffer
			if code := execute(args, &stdout, &stderr); code != 1 {
				t.Errorf("exit code = %d, want 1", code)
			}
		})
	}
}

func TestVersionIgnoresInvalidEnvironment(t *testing.T) {
	t.Setenv("LEADER_ELECTOR_RETRY_PERIOD", "often")
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"--version"}, &stdout, &stderr); code != 0 {
		t.Errorf("exit code = %d, want 0 (stderr %q)", code, stderr.String())
	}
}

// TestInvalidConfigurationIsOneLine: whatever the input holds (control
// characters, terminal escapes), the refusal is one printable line.
func TestInvalidConfigurationIsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"--lease-name=my-app", "stray\r\x1b[2Jargument"},
		{"--lease-name=my-app", "--no-such-flag\x1b[31m"},
		{"--lease-name=my-app", "--identity=a\u2028b"},
		{"--lease-name=my-app", "not\xffUTF-8"},
		{"--lease-name=my-app", "--on-change-url=http://10.0.0.5:80/\x1b[2J\nhook"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(args, &stdout, &stderr); code != exitInvalidInput {
			t.Errorf("execute(%q) = %d, want %d", args, code, exitInvalidInput)
		}
		line := strings.TrimSuffix(stderr.String(), "\n")
		// A line OneLine leaves as it is has nothing to escape.
		if textline.OneLine(errors.New(line)) != line {
			t.Errorf("execute(%q) printed control characters: %q", args, stderr.String())
		}
	}
}

// TestExecuteStatus: "status" as the first argument is the status command,
// with its own flags and exit codes (package status tests the rest).
func TestExecuteStatus(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := execute([]string{"status", "--url=http://127.0.0.1:4040/leader"}, &stdout, &stderr)
	if code != 2 || !strings.HasPrefix(stderr.String(), "leader-elector status: --url") {
		t.Errorf("exit %d, stderr %q; want 2 and the status command's own message", code, stderr.String())
	}
}

// `run` and the watchdog's hidden argument reach package supervisor.
func TestExecuteRun(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"run", "sleep"}, &stdout, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), "leader-elector run: want the command after --") {
		t.Fatalf("run without --: exit code %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := execute([]string{"__run-watchdog"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "watchdog: want one argument") {
		t.Fatalf("watchdog without a deadline: exit code %d, stderr %q", code, stderr.String())
	}
}

// TestCommandsAreDispatched: every subcommand the usage text names (and
// "did you mean" suggests) is one execute runs: its --help is its own.
func TestCommandsAreDispatched(t *testing.T) {
	for _, cmd := range options.Commands {
		var stdout, stderr bytes.Buffer
		code := execute([]string{cmd, "--help"}, &stdout, &stderr)
		if code != 0 || !strings.HasPrefix(stdout.String()+stderr.String(), "Usage: leader-elector "+cmd) {
			t.Errorf("leader-elector %s --help: exit %d, %q", cmd, code, stdout.String()+stderr.String())
		}
	}
}
