package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// fakeLeader answers as a sidecar whose pod leads until it is asked to
// release; a long-poll answers at once with the next revision.
func fakeLeader() *httptest.Server {
	revision, leads := 1, true
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if !leads {
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"error":"this pod is not the leader"}`)
				return
			}
			leads = false
		}
		if r.URL.Query().Has("wait") || r.Method == http.MethodPost {
			revision++
		}
		holder := map[bool]string{true: "pod-a", false: ""}[leads]
		fmt.Fprintf(w, `{"lease":{"namespace":"default","name":"my-app"},"identity":"pod-a","holder":%q,"isLeader":%t,"fencingToken":7,"revision":%d}`, holder, leads, revision)
	}))
}

// Example_fromGo is the snippet of docs/api.md, "From Go"
// (TestDocsShowExampleFromGo keeps the two the same).
func Example_fromGo() {
	srv := fakeLeader()
	defer srv.Close()
	ctx := context.Background()

	c := api.NewClient("http://127.0.0.1:4040", &http.Client{Timeout: time.Minute})
	c = api.NewClient(srv.URL, srv.Client()) // the fake sidecar's address, for the example
	l, err := c.Leader(ctx)                  // GET /leader
	fmt.Println(l.IsLeader, l.Revision, err)
	l, err = c.WaitLeader(ctx, l.Revision, 30*time.Second) // long-poll for the next change
	fmt.Println(l.IsLeader, l.Revision, err)
	_, err = c.Release(ctx) // POST /release; *api.Error{StatusCode: 409} on a follower
	fmt.Println(err)
	_, err = c.Release(ctx)
	fmt.Println(err)
	// Output:
	// true 1 <nil>
	// true 2 <nil>
	// <nil>
	// 409 Conflict: this pod is not the leader
}

// TestDocsShowExampleFromGo: every line of docs/api.md's Go snippet is a
// line of Example_fromGo (comments and spacing aside), so the snippet users
// copy compiles and does what the example's output shows.
func TestDocsShowExampleFromGo(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile("(?s)### From Go.*?```go\n(.*?)```").FindSubmatch(doc)
	if block == nil {
		t.Fatal(`docs/api.md has no Go block under "### From Go"`)
	}
	self, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	code := map[string]bool{}
	for _, line := range strings.Split(string(self), "\n") {
		code[normalize(line)] = true
	}
	for _, line := range strings.Split(strings.TrimSpace(string(block[1])), "\n") {
		if !code[normalize(line)] {
			t.Errorf("docs/api.md's snippet line %q is not in Example_fromGo", line)
		}
	}
}

// normalize drops a line's comment and its spacing.
func normalize(line string) string {
	line, _, _ = strings.Cut(line, "//")
	return strings.Join(strings.Fields(line), " ")
}
