package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// fakeSidecar answers as the sidecar does and records the last request.
func fakeSidecar(t *testing.T, status int, contentType, body string) (*Client, *http.Request) {
	t.Helper()
	var last http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last = *r
		w.Header().Set("Content-Type", contentType)
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return NewClient(srv.URL, srv.Client()), &last
}

func TestClientDecodesAnswers(t *testing.T) {
	ctx := context.Background()
	c, req := fakeSidecar(t, 200, "application/json", `{"lease":{"namespace":"default","name":"app"},"holder":"pod-a","isLeader":true,"fencingToken":7,"validUntil":"2026-11-29T08:00:10.123456Z","revision":3}`)
	l, err := c.WaitLeader(ctx, 2, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != http.MethodGet || req.URL.Path != "/leader" || req.URL.Query().Get("revision") != "2" || req.URL.Query().Get("wait") != "30s" {
		t.Errorf("asked %s %s", req.Method, req.URL)
	}
	want := time.Date(2026, 11, 29, 8, 0, 10, 123456000, time.UTC)
	if l.Lease.Name != "app" || l.Holder != "pod-a" || !l.IsLeader || l.FencingToken != 7 || !l.ValidUntil.Equal(want) || l.Revision != 3 {
		t.Errorf("decoded %+v", l)
	}

	c, req = fakeSidecar(t, 200, "application/json", `{"partitions":4,"effectivePartitions":2,"owned":[{"partition":1,"fencingToken":5,"since":"2026-11-29T08:00:00.000000Z","validUntil":"2026-11-29T08:00:10.000000Z"}]}`)
	p, err := c.ReleasePartition(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != http.MethodPost || req.URL.Path != "/partitions/3/release" || req.URL.RawQuery != "" {
		t.Errorf("asked %s %s", req.Method, req.URL)
	}
	if p.Partitions != 4 || p.EffectivePartitions != 2 || len(p.Owned) != 1 || p.Owned[0].Partition != 1 || p.Owned[0].FencingToken != 5 {
		t.Errorf("decoded %+v", p)
	}
}

func TestClientReturnsTypedErrors(t *testing.T) {
	cases := []struct {
		name        string
		contentType string
		body        string
		want        string
	}{
		{"the API's JSON", "application/json", `{"error":"not the leader"}` + "\n", "not the leader"},
		{"anything else, as it is", "text/html", " <h1>bad gateway</h1>\n", "<h1>bad gateway</h1>"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, req := fakeSidecar(t, http.StatusConflict, tc.contentType, tc.body)
			_, err := c.Release(context.Background())
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v (%T), want an *Error", err, err)
			}
			if e.StatusCode != http.StatusConflict || e.Message != tc.want {
				t.Errorf("got %+v, want status 409 and message %q", e, tc.want)
			}
			if req.Method != http.MethodPost || req.URL.Path != "/release" {
				t.Errorf("asked %s %s", req.Method, req.URL)
			}
		})
	}
}

func TestClientWrapsTransportErrors(t *testing.T) {
	c, _ := fakeSidecar(t, 200, "application/json", `not json`)
	_, err := c.Partitions(context.Background())
	var e *Error
	if err == nil || errors.As(err, &e) {
		t.Errorf("err = %v, want a decoding error that is no *Error", err)
	}
}

// TestClientCheckpoint: PUT /partitions/<i>/checkpoint with the value as
// the body; a refusal's reason and a 429's Retry-After reach the *Error.
func TestClientCheckpoint(t *testing.T) {
	var method, path, body string
	status, answer, retryAfter := http.StatusOK, `{"partition":2,"checkpoint":{"value":"offset=9","holder":"pod-a","fencingToken":7,"time":"2026-11-29T08:00:00.000000Z"}}`, ""
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		method, path, body = r.Method, r.URL.Path, string(b)
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := NewClient(srv.URL, srv.Client())

	s, err := c.Checkpoint(context.Background(), 2, "offset=9")
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodPut || path != "/partitions/2/checkpoint" || body != "offset=9" {
		t.Errorf("asked %s %s with %q", method, path, body)
	}
	if s.Partition != 2 || s.Checkpoint.Value != "offset=9" || s.Checkpoint.FencingToken != 7 || s.Checkpoint.Holder != "pod-a" {
		t.Errorf("decoded %+v", s)
	}

	status, answer = http.StatusConflict, `{"error":"checkpoint refused","reason":"claim-expired"}`
	var e *Error
	if _, err := c.Checkpoint(context.Background(), 2, "x"); !errors.As(err, &e) || e.StatusCode != http.StatusConflict || e.Reason != ReasonClaimExpired {
		t.Errorf("refused: %v, want 409 with reason %s", err, ReasonClaimExpired)
	}
	status, answer, retryAfter = http.StatusTooManyRequests, `{"error":"too fast"}`, "2"
	if _, err := c.Checkpoint(context.Background(), 2, "x"); !errors.As(err, &e) || e.StatusCode != http.StatusTooManyRequests || e.RetryAfter != 2*time.Second {
		t.Errorf("rate-limited: %v (%+v), want 429 with RetryAfter 2s", err, e)
	}
}

// TestClientTermCalls: the term-scoped calls send ?fencingToken= (and
// AcquireAfterTerm its wait), and a refusal's reason reaches the *Error.
func TestClientTermCalls(t *testing.T) {
	var asked []string
	status, answer := http.StatusOK, `{}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		asked = append(asked, r.Method+" "+r.URL.RequestURI()+" "+string(b))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(answer))
	}))
	defer srv.Close()
	c := NewClient(srv.URL, srv.Client())
	ctx := context.Background()
	if _, err := c.CheckpointTerm(ctx, 2, 41, "offset=9"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleasePartitionTerm(ctx, 2, 41); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReleaseTerm(ctx, 7); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireAfterTerm(ctx, 7, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireAfterTerm(ctx, 7, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PUT /partitions/2/checkpoint?fencingToken=41 offset=9",
		"POST /partitions/2/release?fencingToken=41 ",
		"POST /release?fencingToken=7 ",
		"POST /acquire?fencingToken=7 ",
		"POST /acquire?fencingToken=7&wait=30s ",
	}
	if strings.Join(asked, "\n") != strings.Join(want, "\n") {
		t.Errorf("asked\n%s\nwant\n%s", strings.Join(asked, "\n"), strings.Join(want, "\n"))
	}
	status, answer = http.StatusConflict, `{"error":"checkpoint refused","reason":"term-changed"}`
	var e *Error
	if _, err := c.CheckpointTerm(ctx, 2, 40, "x"); !errors.As(err, &e) || e.StatusCode != http.StatusConflict || e.Reason != ReasonTermChanged {
		t.Errorf("refused: %v, want 409 with reason %s", err, ReasonTermChanged)
	}
}
