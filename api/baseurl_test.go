package api

import (
	"strings"
	"testing"
)

// TestBaseURLFromEnv: $LEADER_ELECTOR_URL, else the sidecar's own
// $LEADER_ELECTOR_HTTP_ADDRESS made into a URL, else the default; a bad
// value is an error naming its variable, never a silent fallback.
func TestBaseURLFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "nothing set", want: DefaultBaseURL},
		{name: "empty variables count as unset", env: map[string]string{EnvURL: "", EnvHTTPAddress: ""}, want: DefaultBaseURL},
		{name: "the URL", env: map[string]string{EnvURL: "http://127.0.0.1:5050"}, want: "http://127.0.0.1:5050"},
		{name: "the URL with a trailing slash", env: map[string]string{EnvURL: "https://[::1]:5050/"}, want: "https://[::1]:5050"},
		{name: "the URL wins over the address", env: map[string]string{EnvURL: "http://localhost:5050", EnvHTTPAddress: "127.0.0.1:6060"}, want: "http://localhost:5050"},
		{name: "the address", env: map[string]string{EnvHTTPAddress: "127.0.0.1:6060"}, want: "http://127.0.0.1:6060"},
		{name: "a wildcard address is reached on loopback", env: map[string]string{EnvHTTPAddress: ":6060"}, want: "http://127.0.0.1:6060"},
		{name: "0.0.0.0 is reached on loopback", env: map[string]string{EnvHTTPAddress: "0.0.0.0:6060"}, want: "http://127.0.0.1:6060"},
		{name: ":: is reached on IPv6 loopback", env: map[string]string{EnvHTTPAddress: "[::]:6060"}, want: "http://[::1]:6060"},
		{name: "a pod IP is kept", env: map[string]string{EnvHTTPAddress: "10.0.0.5:6060"}, want: "http://10.0.0.5:6060"},
		// A zone's "%" is escaped, so that the URL parses again.
		{name: "a URL with an IPv6 zone", env: map[string]string{EnvURL: "http://[fe80::1%25eth0]:4040"}, want: "http://[fe80::1%25eth0]:4040"},
		{name: "an address with an IPv6 zone", env: map[string]string{EnvHTTPAddress: "[fe80::1%eth0]:4040"}, want: "http://[fe80::1%25eth0]:4040"},
		{name: "a URL with a path", env: map[string]string{EnvURL: "http://127.0.0.1:4040/leader"}, wantErr: `$LEADER_ELECTOR_URL "http://127.0.0.1:4040/leader": want http://host:port`},
		{name: "a URL without a scheme", env: map[string]string{EnvURL: "127.0.0.1:4040"}, wantErr: "$LEADER_ELECTOR_URL"},
		{name: "another scheme", env: map[string]string{EnvURL: "ftp://x"}, wantErr: "$LEADER_ELECTOR_URL"},
		{name: "a bad URL does not fall back to the address", env: map[string]string{EnvURL: "x", EnvHTTPAddress: "127.0.0.1:6060"}, wantErr: "$LEADER_ELECTOR_URL"},
		{name: "an address with port 0", env: map[string]string{EnvHTTPAddress: "127.0.0.1:0"}, wantErr: `$LEADER_ELECTOR_HTTP_ADDRESS "127.0.0.1:0": not host:port with a fixed port`},
		{name: "an address without a port", env: map[string]string{EnvHTTPAddress: "127.0.0.1"}, wantErr: "$LEADER_ELECTOR_HTTP_ADDRESS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := BaseURLFromEnv(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("BaseURLFromEnv = %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("BaseURLFromEnv = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
