package supervisor

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMainRefusesBadInput(t *testing.T) {
	noExec := filepath.Join(t.TempDir(), "not-executable")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantCode int
		want     string
	}{
		{"no command", nil, nil, 2, "want the command after --"},
		{"no --", []string{"sleep", "1"}, nil, 2, "want the command after --"},
		{"-- without a command", []string{"--"}, nil, 2, "want the command after --"},
		{"unknown flag", []string{"--bogus", "--", "true"}, nil, 2, "unknown flag: --bogus"},
		{"bad duration", []string{"--stop-grace=soon", "--", "true"}, nil, 2, "--stop-grace"},
		{"zero grace", []string{"--stop-grace=0s", "--", "true"}, nil, 2, "--stop-grace 0s is outside the supported range"},
		{"poll too fast", []string{"--poll-interval=1ms", "--", "true"}, nil, 2, "--poll-interval 1ms is outside"},
		{"backoff too long", []string{"--restart-backoff=1m", "--", "true"}, nil, 2, "--restart-backoff 1m0s is outside"},
		{"copy-to with a command", []string{"--copy-to=/tmp/x", "--", "true"}, nil, 2, "--copy-to takes no command"},
		{"negative start delay", []string{"--start-delay=-1s", "--", "true"}, nil, 2, "--start-delay -1s is outside"},
		{"hook timeout zero", []string{"--on-start-leading=true", "--hook-timeout=0s"}, nil, 2, "--hook-timeout 0s is outside"},
		{"a hook and a command without --", []string{"--on-start-leading=true", "sleep", "1"}, nil, 2, "want the command after --"},
		{"unknown on-exit", []string{"--on-exit=panic", "--", "true"}, nil, 2, `--on-exit "panic" is unknown`},
		{"bad url", []string{"--url=localhost:4040", "--", "true"}, nil, 2, "want http://host:port"},
		{"bad url env", []string{"--", "true"}, map[string]string{"LEADER_ELECTOR_URL": "http://x/y"}, 2, "$LEADER_ELECTOR_URL"},
		{"partitions without a command", []string{"--partitions", "--on-start-leading=true"}, nil, 2, "--partitions runs the command after -- once per owned partition: want a command"},
		{"partitions with a hook", []string{"--partitions", "--on-stop-leading=true", "--", "true"}, nil, 2, "--on-start-leading and --on-stop-leading follow one leadership; they cannot be combined with --partitions"},
		{"partitions with on-exit=exit", []string{"--partitions", "--on-exit=exit", "--", "true"}, nil, 2, "--on-exit=exit cannot be combined with --partitions"},
		{"partition-term alone", []string{"--partition-term=1@2", "--", "true"}, nil, 2, "--partition-term is internal to --partitions"},
		{"partition-term malformed", []string{"--partitions", "--partition-term=1", "--", "true"}, nil, 2, `want P@T, two numbers, got "1"`},
		{"not found", []string{"--", "no-such-command-anywhere"}, nil, 127, `cannot execute "no-such-command-anywhere"`},
		{"not executable", []string{"--", noExec}, nil, 126, "permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d", code, tc.wantCode)
			}
			if !strings.Contains(stderr.String(), tc.want) || strings.Count(stderr.String(), "\n") != 1 {
				t.Errorf("stderr %q: want one line with %q", stderr.String(), tc.want)
			}
		})
	}
}

func TestMainHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--help"}, func(string) (string, bool) { return "", false }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if !strings.HasPrefix(stdout.String(), "Usage: leader-elector run") || !strings.Contains(stdout.String(), "--stop-grace") {
		t.Fatalf("help: %q", stdout.String())
	}
}

func TestMainCopyTo(t *testing.T) {
	dst := filepath.Join(t.TempDir(), "leader-elector")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"--copy-to=" + dst}, func(string) (string, bool) { return "", false }, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	self, _ := os.Executable()
	want, _ := os.ReadFile(self)
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy differs from the binary (%v)", err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode %v", fi.Mode())
	}
	if code := Main([]string{"--copy-to=/no/such/dir/x"}, func(string) (string, bool) { return "", false }, &stdout, &stderr); code != ExitRuntimeError || !strings.Contains(stderr.String(), "--copy-to:") {
		t.Fatalf("copy to a missing directory: exit code %d, %q", code, stderr.String())
	}
}

// TestBaseURLIsLoopback: the supervisor's deadline assumes the sidecar of
// its own pod (the same node's clocks), and a sidecar elsewhere would run
// the child wherever that one leads; so --url and $LEADER_ELECTOR_URL name
// a loopback host, as the sidecar's --on-change-url does (review note 9c).
func TestBaseURLIsLoopback(t *testing.T) {
	for _, tc := range []struct {
		raw, want, wantErr string
	}{
		{raw: "http://127.0.0.1:4040", want: "http://127.0.0.1:4040"},
		{raw: "http://[::1]:4040/", want: "http://[::1]:4040"},
		{raw: "http://localhost:4040", want: "http://localhost:4040"},
		{raw: "http://127.0.0.2:4040", want: "http://127.0.0.2:4040"},
		{raw: "http://10.0.0.1:4040", wantErr: "is not a loopback address"},
		{raw: "http://169.254.169.254:80", wantErr: "is not a loopback address"},
		{raw: "http://leader.example:4040", wantErr: "is not a loopback address"},
		{raw: "http://[::ffff:127.0.0.1]:4040", wantErr: "is not a loopback address"},
		{raw: "http://[fe80::1%25eth0]:4040", wantErr: "is not a loopback address"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := baseURL(tc.raw, func(string) (string, bool) { return "", false })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("baseURL(%q) = %q, %v; want an error with %q", tc.raw, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("baseURL(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
			}
		})
	}
}

// TestBaseURLFromTheEnvironment: without --url the supervisor finds the
// sidecar as leader-elector status does (api.BaseURLFromEnv), the sidecar's
// own $LEADER_ELECTOR_HTTP_ADDRESS included, and still only on loopback.
func TestBaseURLFromTheEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name          string
		flag          string
		env           map[string]string
		want, wantErr string
	}{
		{name: "nothing set", want: "http://127.0.0.1:4040"},
		{name: "$LEADER_ELECTOR_URL", env: map[string]string{"LEADER_ELECTOR_URL": "http://localhost:5050", "LEADER_ELECTOR_HTTP_ADDRESS": "127.0.0.1:6060"}, want: "http://localhost:5050"},
		{name: "the sidecar's address", env: map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": "127.0.0.1:6060"}, want: "http://127.0.0.1:6060"},
		{name: "the sidecar's wildcard address", env: map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": ":6060"}, want: "http://127.0.0.1:6060"},
		{name: "the sidecar's address on the pod IP", env: map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": "10.0.0.5:6060"}, wantErr: "is not a loopback address"},
		{name: "a URL elsewhere", env: map[string]string{"LEADER_ELECTOR_URL": "http://10.0.0.5:6060"}, wantErr: "is not a loopback address"},
		{name: "--url wins", flag: "http://[::1]:7070", env: map[string]string{"LEADER_ELECTOR_URL": "http://10.0.0.5:6060"}, want: "http://[::1]:7070"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := baseURL(tc.flag, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("baseURL = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("baseURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestMainRefusesEveryProblemAtOnce: Validate checks each option on its
// own, and Main prints every refusal, on one line.
func TestMainRefusesEveryProblemAtOnce(t *testing.T) {
	var stdout, stderr bytes.Buffer
	args := []string{"--stop-grace=0s", "--poll-interval=1ms", "--on-exit=panic", "--log-format=xml", "--url=http://10.0.0.1:4040"}
	if code := Main(args, func(string) (string, bool) { return "", false }, &stdout, &stderr); code != ExitBadInput {
		t.Errorf("exit code %d, want %d", code, ExitBadInput)
	}
	line := stderr.String()
	for _, want := range []string{
		"want the command after -- (or a hook)",
		"--stop-grace 0s is outside",
		"--poll-interval 1ms is outside",
		`--on-exit "panic" is unknown`,
		`--log-format "xml" is unknown`,
		"is not a loopback address",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("stderr %q: want %q", line, want)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Errorf("stderr %q: want one line", line)
	}
}

// TestOptionsLogFormat: --log-format, else $LEADER_ELECTOR_LOG_FORMAT (the
// sidecar's own variable), else text; -v is klog's.
func TestOptionsLogFormat(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "default", want: "text"},
		{name: "the flag", args: []string{"--log-format=json"}, want: "json"},
		{name: "the environment", env: map[string]string{EnvLogFormat: "json"}, want: "json"},
		{name: "the flag wins", args: []string{"--log-format=text"}, env: map[string]string{EnvLogFormat: "json"}, want: "text"},
		{name: "a bad variable is named", env: map[string]string{EnvLogFormat: "xml"}, wantErr: `$LEADER_ELECTOR_LOG_FORMAT "xml" is unknown`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parseOptions(append(tc.args, "--", "true"), func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			err = o.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Validate = %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || o.LogFormat != tc.want {
				t.Fatalf("log format %q, %v; want %q", o.LogFormat, err, tc.want)
			}
		})
	}
	// -v: restore klog's global verbosity afterwards.
	t.Cleanup(func() { _, _, _ = parseOptions([]string{"-v=0"}, func(string) (string, bool) { return "", false }) })
	if o, _, err := parseOptions([]string{"-v=3", "--", "true"}, func(string) (string, bool) { return "", false }); err != nil || o.Verbosity != 3 {
		t.Fatalf("-v=3: %+v, %v", o, err)
	}
}

// TestOptionsStartDelayDefault: --start-delay defaults to --stop-grace +
// 500ms, and that default is never out of range itself.
func TestOptionsStartDelayDefault(t *testing.T) {
	o, _, err := parseOptions([]string{"--stop-grace=5m", "--", "true"}, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil || o.StartDelay != 5*time.Minute+500*time.Millisecond {
		t.Fatalf("start delay %v, %v; want 5m0.5s and no error", o.StartDelay, err)
	}
}
