package options

import (
	"strings"
	"testing"
)

// --logging-format is Kubernetes components' name of --log-format: it sets
// the format from the command line or the environment, the command line
// wins over the environment whichever name either uses, two names that
// disagree at the same level are an error, and it is not deprecated.
func TestLoggingFormatAlias(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		vars    map[string]string
		want    string
		wantErr string
	}{
		{name: "flag", args: []string{"--logging-format=json"}, want: "json"},
		{name: "environment", vars: map[string]string{"LEADER_ELECTOR_LOGGING_FORMAT": "json"}, want: "json"},
		{name: "agrees with --log-format", args: []string{"--logging-format=json", "--log-format=json"}, want: "json"},
		{name: "command line --log-format wins over the environment's alias", args: []string{"--log-format=text"},
			vars: map[string]string{"LEADER_ELECTOR_LOGGING_FORMAT": "json"}, want: "text"},
		{name: "command line alias wins over the environment's --log-format", args: []string{"--logging-format=json"},
			vars: map[string]string{"LEADER_ELECTOR_LOG_FORMAT": "text"}, want: "json"},
		{name: "disagrees with --log-format", args: []string{"--logging-format=json", "--log-format=text"},
			wantErr: `--log-format and its alias --logging-format disagree ("text", "json"); give only --log-format`},
		{name: "validated", args: []string{"--logging-format=xml"}, wantErr: `--log-format "xml" is unknown`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, _, err := parse(append([]string{"--lease-name=my-app"}, tc.args...), fakeEnv{vars: tc.vars, hostname: "host-1"}.environment())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if o.LogFormat != tc.want {
				t.Errorf("LogFormat = %q, want %q", o.LogFormat, tc.want)
			}
			if len(o.deprecated) != 0 {
				t.Errorf("deprecated = %q, want none: --logging-format is not deprecated", o.deprecated)
			}
		})
	}
}
