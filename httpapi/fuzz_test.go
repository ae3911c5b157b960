package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// The fuzz targets of the application API: `make fuzz` runs each, and
// testdata/fuzz/<target> holds the corpus that `go test` replays.

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead, http.MethodOptions, "BREW"}

// fuzzRequest reads a request as the server would from a request line with
// method, target and an Accept header; false if net/http refuses it itself
// (those answers are net/http's, see TestNetHTTPPlainTextErrors).
func fuzzRequest(method byte, target, accept string) (*http.Request, bool) {
	raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\n", fuzzMethods[int(method)%len(fuzzMethods)], target)
	if accept != "" {
		raw += "Accept: " + accept + "\r\n"
	}
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
	if err != nil {
		return nil, false
	}
	// Long-polls and streams end at once: the answer is what is checked.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return r.WithContext(ctx), true
}

// hijackableRecorder is a ResponseRecorder that can be taken over, as the
// server's connections can (an event stream leaves net/http, see stream):
// the connection it hands over has a client that has gone away already, so
// the stream ends at its first write.
type hijackableRecorder struct {
	*httptest.ResponseRecorder
}

func newHijackableRecorder() hijackableRecorder {
	return hijackableRecorder{ResponseRecorder: httptest.NewRecorder()}
}

func (w hijackableRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	server, client := net.Pipe()
	_ = client.Close()
	return server, bufio.NewReadWriter(bufio.NewReader(server), bufio.NewWriter(server)), nil
}

// checkAnswer fails on a 5xx, and on an error answer that is not a JSON
// object with exactly a non-empty "error" and, on some, a non-empty
// "reason".
func checkAnswer(t *testing.T, r *http.Request, w *httptest.ResponseRecorder) {
	t.Helper()
	if w.Code >= 500 {
		t.Fatalf("%s %s: %d %q", r.Method, r.RequestURI, w.Code, w.Body)
	}
	if w.Code < 400 {
		return
	}
	var body map[string]any
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: %d with Content-Type %q", r.Method, r.RequestURI, w.Code, ct)
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || len(body) != 1 && (len(body) != 2 || body["reason"] == nil) {
		t.Fatalf("%s %s: %d with body %q, want {\"error\": ...}", r.Method, r.RequestURI, w.Code, w.Body)
	}
	if msg, ok := body["error"].(string); !ok || msg == "" {
		t.Fatalf("%s %s: %d with body %q, want {\"error\": ...}", r.Method, r.RequestURI, w.Code, w.Body)
	}
	if reason, ok := body["reason"]; ok && (reason == "" || reason == nil) {
		t.Fatalf("%s %s: %d with an empty reason: %q", r.Method, r.RequestURI, w.Code, w.Body)
	}
}

// FuzzAPIHandler: any request to the leader election API is answered
// without a 5xx, errors are JSON, and the leader releases only for POST
// /release with a well-formed query that is empty or names a term.
func FuzzAPIHandler(f *testing.F) {
	for _, seed := range []struct {
		method         byte
		target, accept string
	}{
		{0, "/leader", ""},
		{0, "/leader?wait=1s&revision=3", "text/plain"},
		{0, "/leader?%zz", ""},
		{0, "/?%zz=1", ""},
		{0, "/leader?wait=1ms;revision=1", ""},
		{0, "/events", ""},
		{0, "/leader", "text/plain;q=0, application/json;q=0"},
		{0, "/leader", "text/plain;q=NaN, application/json"},
		{1, "/release", ""},
		{1, "/release?%", ""},
		{1, "/release?", ""},
		{1, "/release?&", ""},
		{1, "/release?fencingToken=7", ""},
		{1, "/release?fencingToken=07", ""},
		{1, "/release?fencingToken=2147483648", ""},
		{1, "/acquire?fencingToken=6&wait=1s", ""},
		{3, "/", ""},
		{0, "http://x/leader?wait=5m", ""},
	} {
		f.Add(seed.method, seed.target, seed.accept)
	}
	f.Fuzz(func(t *testing.T, method byte, target, accept string) {
		r, ok := fuzzRequest(method, target, accept)
		if !ok {
			return
		}
		el := newFakeElection(leaderState())
		var releases atomic.Int32
		el.release = func(context.Context) (leadership.State, error) {
			releases.Add(1)
			return followerState(), nil
		}
		w := newHijackableRecorder()
		NewAPIHandler(el, APIOptions{}).ServeHTTP(w, r)
		checkAnswer(t, r, w.ResponseRecorder)
		if releases.Load() > 0 {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if r.Method != http.MethodPost || r.URL.Path != "/release" || err != nil || !emptyOrTerm(q) {
				t.Fatalf("%s %s released", r.Method, r.RequestURI)
			}
		}
	})
}

// fuzzPartitions releases any partition in range, and counts releases.
type fuzzPartitions struct {
	*fakePartitions
	released atomic.Int32
}

func (f *fuzzPartitions) ReleaseTerm(_ context.Context, i int, _ int64) (ownership.State, error) {
	if i < 0 || i >= 4 {
		return f.Snapshot(), fmt.Errorf("%w: %d", ownership.ErrOutOfRange, i)
	}
	f.released.Add(1)
	return f.Snapshot(), nil
}

var canonicalRelease = regexp.MustCompile(`^/partitions/(0|[1-9][0-9]*)/release$`)

// emptyOrTerm reports whether q is empty or exactly ?fencingToken= with a
// canonical decimal within int32.
func emptyOrTerm(q url.Values) bool {
	if len(q) == 0 {
		return true
	}
	v := q[termParam]
	if len(q) != 1 || len(v) != 1 || !canonicalNumber.MatchString(v[0]) {
		return false
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	return err == nil && n <= math.MaxInt32
}

// FuzzPartitionsAPIHandler: the same for partition mode; a partition is
// released only for POST /partitions/<i>/release with <i> in canonical
// decimal and a well-formed query that is empty or names a term.
func FuzzPartitionsAPIHandler(f *testing.F) {
	for _, seed := range []struct {
		method         byte
		target, accept string
	}{
		{0, "/partitions", ""},
		{0, "/partitions?wait=1s", ""},
		{0, "/partitions?%zz", ""},
		{0, "/events", ""},
		{1, "/partitions/1/release", ""},
		{1, "/partitions/+1/release", ""},
		{1, "/partitions/01/release", ""},
		{1, "/partitions/%31/release", ""},
		{1, "/partitions/1/release?%", ""},
		{1, "/partitions/99999999999999999999/release", ""},
		{1, "/partitions//release", ""},
		{1, "/partitions/1/release?fencingToken=3", ""},
		{1, "/partitions/1/release?fencingToken=-3", ""},
		{2, "/partitions/1/checkpoint?fencingToken=3", ""},
		{2, "/partitions/1/checkpoint?fencingToken=3&fencingToken=4", ""},
		{1, "/partitions/1/checkpoint", ""},
		{2, "/partitions/1/checkpoint", ""},
		{2, "/partitions/2/checkpoint", ""},
		{2, "/partitions/3/checkpoint?", ""},
		{0, "/leader", ""},
	} {
		f.Add(seed.method, seed.target, seed.accept)
	}
	f.Fuzz(func(t *testing.T, method byte, target, accept string) {
		r, ok := fuzzRequest(method, target, accept)
		if !ok {
			return
		}
		p := &fuzzPartitions{fakePartitions: newFakePartitions()}
		w := newHijackableRecorder()
		NewPartitionsAPIHandler(p, APIOptions{}).ServeHTTP(w, r)
		checkAnswer(t, r, w.ResponseRecorder)
		if p.released.Load() > 0 {
			q, err := url.ParseQuery(r.URL.RawQuery)
			if r.Method != http.MethodPost || !canonicalRelease.MatchString(r.URL.EscapedPath()) || err != nil || !emptyOrTerm(q) {
				t.Fatalf("%s %s released a partition", r.Method, r.RequestURI)
			}
		}
	})
}

// FuzzParseLeaderQuery: ?wait=&revision= either parses to a wait within
// 0..maxWait or is refused with a message.
func FuzzParseLeaderQuery(f *testing.F) {
	for _, seed := range []string{"", "wait=30s", "wait=1s&revision=3", "wait=-1s", "wait=1e9h", "revision=18446744073709551615", "revision=+1", "wait=1s&wait=2s", "color=blue", "wait=9223372036854775807ns"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return // routes answers 400 before parseLeaderQuery runs
		}
		q, err := parseLeaderQuery(v)
		if err != nil {
			if err.Error() == "" {
				t.Fatalf("%q: empty error", raw)
			}
			return
		}
		if q.wait < 0 || q.wait > maxWait {
			t.Fatalf("%q: wait %v outside 0..%v", raw, q.wait, maxWait)
		}
		if q.hasRevision != v.Has("revision") {
			t.Fatalf("%q: hasRevision %v", raw, q.hasRevision)
		}
	})
}

// FuzzWantsPlainText: any Accept header gives an answer, the same every
// time, and never text/plain when no text type is acceptable at all.
func FuzzWantsPlainText(f *testing.F) {
	for _, seed := range [][2]string{
		{"", ""}, {"*/*", ""}, {"text/plain", ""}, {"application/json;q=0.5, text/plain", ""},
		{"text/plain;q=0, */*", ""}, {"text/html", "text/plain;q=0.4"}, {"text/plain;q=NaN, application/json", ""},
		{"text/plain;q=1e400", "application/json;q=1"}, {"text/plain;q=-1, application/json", ""}, {"TEXT/*;Q=0.001", ""},
		{"application/json;q=0.5;q=1", ""}, {"text/plain; charset=\"", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		var accept []string
		for _, h := range []string{a, b} {
			if h != "" {
				accept = append(accept, h)
			}
		}
		plain, err := wantsPlainText(accept)
		again, errAgain := wantsPlainText(accept)
		if plain != again || (err == nil) != (errAgain == nil) {
			t.Fatalf("%q: %v %v, then %v %v", accept, plain, err, again, errAgain)
		}
		if err != nil && err.Error() == "" {
			t.Fatalf("%q: empty error", accept)
		}
		if plain && !strings.Contains(strings.ToLower(strings.Join(accept, ",")), "text/") {
			t.Fatalf("%q: text/plain chosen though no text type is acceptable", accept)
		}
	})
}
