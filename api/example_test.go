package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// fakeLeader answers as a sidecar whose pod leads in term 7 until it is
// asked to release; then another pod leads, until a blocking acquire waits
// for it to release and begins the next term. A long-poll answers at once
// with the next revision. ?fencingToken= is answered as the sidecar does.
func fakeLeader() *httptest.Server {
	revision, leads, token := 1, true, int64(7)
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var extra string
		term, named := r.URL.Query().Get("fencingToken"), r.URL.Query().Has("fencingToken")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/release":
			if named && leads && term != fmt.Sprint(token) {
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"error":"this pod leads in another term than the one given","reason":"term-changed"}`)
				return
			}
			extra = fmt.Sprintf(`,"released":%t`, leads)
			if leads {
				leads = false
				revision++
			}
		case r.Method == http.MethodPost && r.URL.Path == "/acquire":
			if named && leads && term == fmt.Sprint(token) {
				w.WriteHeader(http.StatusConflict)
				fmt.Fprint(w, `{"error":"term has not ended","reason":"term-current"}`)
				return
			}
			// Another pod holds the Lease, and releases it while a
			// blocking acquire (?wait=) waits.
			if !leads && r.URL.Query().Has("wait") {
				leads = true
				revision++
				token++
			}
			extra = fmt.Sprintf(`,"acquired":%t`, leads)
		case r.URL.Query().Has("wait"):
			revision++
		}
		holder := map[bool]string{true: "pod-a", false: ""}[leads]
		fmt.Fprintf(w, `{"lease":{"namespace":"default","name":"my-app"},"identity":"pod-a","holder":%q,"isLeader":%t,"fencingToken":%d,"revision":%d%s}`, holder, leads, token, revision, extra)
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
	r, err := c.Release(ctx) // POST /release: the leader steps down
	fmt.Println(r.Released, err)
	r, err = c.Release(ctx) // a no-op when this pod does not lead
	fmt.Println(r.Released, err)
	// Output:
	// true 1 <nil>
	// true 2 <nil>
	// true <nil>
	// false <nil>
}

// Example_steer is the snippet of docs/api.md, "The app steers its
// leadership" (the e2e suite's TestDocSnippets keeps the two the same).
func Example_steer() {
	srv := fakeLeader()
	defer srv.Close()
	ctx := context.Background()
	c := api.NewClient(srv.URL, srv.Client()) // the fake sidecar, for the example
	_, _ = c.Release(ctx)

	a, err := c.TryAcquire(ctx, 3, 500*time.Millisecond) // POST /acquire?retries=3&retryDelay=500ms
	fmt.Println(a.Acquired, err)                         // false: another pod holds the Lease; not an error
	a, err = c.WaitAcquire(ctx, 30*time.Second)          // POST /acquire?wait=30s: campaign until leading
	fmt.Println(a.Acquired, a.FencingToken, err)
	alive, err := c.IsLeader(ctx) // checkAlive: GET /leader, answered locally
	fmt.Println(alive, err)
	_, err = c.ReleaseTerm(ctx, a.FencingToken-1) // a release left over from an earlier term
	fmt.Println(err)
	r, err := c.ReleaseTerm(ctx, a.FencingToken) // POST /release?fencingToken=: only the term it won
	fmt.Println(r.Released, err)
	a, err = c.AcquireAfterTerm(ctx, a.FencingToken, 30*time.Second) // POST /acquire?fencingToken=&wait=30s: a later term only
	fmt.Println(a.Acquired, a.FencingToken, err)
	// Output:
	// false <nil>
	// true 8 <nil>
	// true <nil>
	// 409 Conflict: this pod leads in another term than the one given
	// true <nil>
	// true 9 <nil>
}
