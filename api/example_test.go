package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// Example_fromGo is the snippet of docs/api.md, "From Go" (the e2e suite's
// TestDocSnippets keeps the two the same).
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
