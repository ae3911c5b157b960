package status

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// A sidecar's answers, as the api package encodes them.
var (
	leader = api.Leader{
		Lease: api.Lease{Namespace: "default", Name: "my-app"}, Identity: "my-app-a", Holder: "my-app-a",
		IsLeader: true, FencingToken: 7, LeaseDurationSeconds: 15,
		RenewTime:   api.Time{Time: time.Now().Add(-time.Second)},
		LeaderSince: api.Time{Time: time.Now().Add(-2 * time.Minute)},
		ValidUntil:  api.Time{Time: time.Now().Add(9 * time.Second)},
		Revision:    12,
	}
	follower = api.Leader{
		Lease: api.Lease{Namespace: "default", Name: "my-app"}, Identity: "my-app-b", Holder: "my-app-a",
		FencingToken: 7, LeaseDurationSeconds: 15, RenewTime: leader.RenewTime, Revision: 3,
	}
	partitions = api.Partitions{
		Lease: api.Lease{Namespace: "default", Name: "workers"}, Identity: "worker-a", Partitions: 4, Members: 2, Member: true,
		FairShare: api.FairShare{Min: 2, Max: 2},
		Owned: []api.OwnedPartition{
			{Partition: 1, FencingToken: 3, Since: api.Time{Time: time.Now().Add(-time.Minute)}, ValidUntil: api.Time{Time: time.Now().Add(5 * time.Second)}},
			{Partition: 3, FencingToken: 9, Since: api.Time{Time: time.Now().Add(-time.Minute)}, ValidUntil: api.Time{Time: time.Now().Add(5 * time.Second)}},
		},
		Revision: 5,
	}
)

// sidecar serves /leader with l, or, with p, /partitions and the 404 that
// partition mode answers on /leader.
func sidecar(t *testing.T, l *api.Leader, p *api.Partitions) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /leader", func(w http.ResponseWriter, r *http.Request) {
		if l == nil {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.Error{Message: "/leader is not served in partition mode (--partitions); use GET /partitions"})
			return
		}
		_ = json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("GET /partitions", func(w http.ResponseWriter, r *http.Request) {
		if p == nil {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(p)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Run(args, func(name string) (string, bool) { v, ok := env[name]; return v, ok }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestStatusText(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *api.Leader
		p    *api.Partitions
		want []string
		not  []string
	}{
		{name: "leader", l: &leader, want: []string{
			"Lease:          default/my-app", "Leader:         my-app-a", "This pod:       my-app-a (leader)",
			"Fencing token:  7", "Valid until:", "(in 9", "Leader since:", "(2m0s ago)", "Last renewal:", "(1s ago)", "Lease duration: 15s", "Revision:       12",
		}},
		{name: "follower", l: &follower, want: []string{"Leader:         my-app-a", "This pod:       my-app-b (follower)", "Fencing token:  7"},
			not: []string{"Valid until", "Leader since", "Leader address"}},
		{name: "follower with the leader's address", l: func() *api.Leader { l := follower; l.HolderAddress = "10.0.0.5:8080"; return &l }(),
			want: []string{"Leader:         my-app-a", "Leader address: 10.0.0.5:8080"}},
		{name: "no one leads", l: &api.Leader{Lease: leader.Lease, Identity: "my-app-b"}, want: []string{"Leader:         (none: no one holds the Lease)", "Last renewal:   -"}},
		{name: "partition mode", p: &partitions, want: []string{
			"Mode:        partitions", "Group:       default/workers", "This pod:    worker-a (member)", "4 over 2 members (fair share 2–2)",
			"Owned:       2", "partition 1:", "token 3", "partition 3:", "token 9", "valid until",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sidecar(t, tc.l, tc.p)
			code, stdout, stderr := run(t, nil, "--url="+s.URL)
			if code != ExitOK || stderr != "" {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			// Columns are aligned by tabwriter; compare words only.
			flat := squeeze(stdout)
			for _, want := range tc.want {
				if !strings.Contains(flat, squeeze(want)) {
					t.Errorf("output lacks %q:\n%s", want, stdout)
				}
			}
			for _, not := range tc.not {
				if strings.Contains(stdout, not) {
					t.Errorf("output has %q:\n%s", not, stdout)
				}
			}
		})
	}
}

// squeeze turns every run of blanks into one space.
func squeeze(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

func TestStatusJSON(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    *api.Leader
		p    *api.Partitions
		into any
		want any
	}{
		{name: "leader", l: &leader, into: &api.Leader{}, want: leader},
		{name: "partitions", p: &partitions, into: &api.Partitions{}, want: partitions},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sidecar(t, tc.l, tc.p)
			code, stdout, stderr := run(t, nil, "-o", "json", "--url", s.URL)
			if code != ExitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr)
			}
			if err := json.Unmarshal([]byte(stdout), tc.into); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, stdout)
			}
			wantJSON, _ := json.Marshal(tc.want)
			gotJSON, _ := json.Marshal(tc.into)
			if !bytes.Equal(wantJSON, gotJSON) {
				t.Errorf("-o json = %s, want %s", gotJSON, wantJSON)
			}
		})
	}
}

// TestStatusURL: --url, else $LEADER_ELECTOR_URL, else the sidecar's own
// $LEADER_ELECTOR_HTTP_ADDRESS, else the default.
func TestStatusURL(t *testing.T) {
	s := sidecar(t, &leader, nil)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(s.URL, "http://"))
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
	}{
		{"--url", []string{"--url=" + s.URL}, map[string]string{"LEADER_ELECTOR_URL": "http://127.0.0.1:1"}},
		{"$LEADER_ELECTOR_URL with a trailing slash", nil, map[string]string{"LEADER_ELECTOR_URL": s.URL + "/", "LEADER_ELECTOR_HTTP_ADDRESS": "127.0.0.1:1"}},
		{"the sidecar's wildcard address", nil, map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": ":" + port}},
		{"the sidecar's 0.0.0.0 address", nil, map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": "0.0.0.0:" + port}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _, stderr := run(t, tc.env, tc.args...); code != ExitOK {
				t.Errorf("exit %d: %s", code, stderr)
			}
		})
	}
	if u, err := baseURL("", func(string) (string, bool) { return "", false }); err != nil || u != api.DefaultBaseURL {
		t.Errorf("default = %q, %v", u, err)
	}
}

func TestStatusExitCodes(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hung.Close)
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"boom"}`))
	}))
	t.Cleanup(broken.Close)
	neither := sidecar(t, nil, nil)
	multiline := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"error":"first\nsecond"}`))
	}))
	t.Cleanup(multiline.Close)

	for _, tc := range []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stderr string
	}{
		{name: "nothing listens", args: []string{"--url=" + closed}, code: ExitUnreachable, stderr: "cannot get the status from " + closed},
		{name: "no answer within the timeout", args: []string{"--url=" + hung.URL, "--timeout=200ms"}, code: ExitUnreachable, stderr: "cannot get the status"},
		{name: "an error answer", args: []string{"--url=" + broken.URL}, code: ExitUnreachable, stderr: "500 Internal Server Error: boom"},
		{name: "neither /leader nor /partitions", args: []string{"--url=" + neither.URL}, code: ExitUnreachable, stderr: "partition mode"},
		{name: "unknown flag", args: []string{"--bogus"}, code: ExitBadFlags, stderr: "unknown flag: --bogus"},
		{name: "unknown output", args: []string{"-o", "yaml"}, code: ExitBadFlags, stderr: `-o "yaml" is unknown`},
		{name: "argument", args: []string{"now"}, code: ExitBadFlags, stderr: "unexpected arguments: now"},
		{name: "bad timeout", args: []string{"--timeout=0s"}, code: ExitBadFlags, stderr: "--timeout 0s is outside"},
		{name: "not a URL", args: []string{"--url=127.0.0.1:4040"}, code: ExitBadFlags, stderr: `--url "127.0.0.1:4040": want http://host:port`},
		{name: "an argument with control characters", args: []string{"one\ntwo\x1b[2J"}, code: ExitBadFlags, stderr: `unexpected arguments: one; two\x1b[2J`},
		{name: "an error answer over lines", args: []string{"--url=" + multiline.URL}, code: ExitUnreachable, stderr: "first; second"},
		{name: "a URL with a path", args: []string{"--url=http://127.0.0.1:4040/leader"}, code: ExitBadFlags, stderr: "no path"},
		{name: "a bad $LEADER_ELECTOR_URL", env: map[string]string{"LEADER_ELECTOR_URL": "ftp://x"}, code: ExitBadFlags, stderr: "$LEADER_ELECTOR_URL"},
		{name: "the sidecar's address with port 0", env: map[string]string{"LEADER_ELECTOR_HTTP_ADDRESS": "127.0.0.1:0"}, code: ExitBadFlags, stderr: "give --url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := run(t, tc.env, tc.args...)
			if code != tc.code || !strings.Contains(stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q on failure", stdout)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr)
			}
		})
	}
	if code, stdout, _ := run(t, nil, "--help"); code != ExitOK || !strings.Contains(stdout, "--url") {
		t.Errorf("--help: exit %d, %q", code, stdout)
	}
}
