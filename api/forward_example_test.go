package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Example_forwardToLeader is the snippet of docs/api.md, "The leader's
// address" (the e2e suite's TestDocSnippets keeps the two the same): a
// follower forwards a request to the leader's app at the address the
// leader advertises.
func Example_forwardToLeader() {
	// The leader's app, and this pod's sidecar, a follower that shows the
	// leader's advertised address.
	leaderApp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "done by the leader: %s %s", r.Method, r.URL.Path)
	}))
	defer leaderApp.Close()
	sidecar := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"lease":{"namespace":"default","name":"my-app"},"identity":"pod-b","holder":"pod-a","isLeader":false,"fencingToken":7,"holderAddress":%q,"revision":3}`, strings.TrimPrefix(leaderApp.URL, "http://"))
	}))
	defer sidecar.Close()
	ctx := context.Background()

	c := api.NewClient("http://127.0.0.1:4040", &http.Client{Timeout: time.Minute})
	c = api.NewClient(sidecar.URL, sidecar.Client()) // the fake sidecar's address, for the example
	l, err := c.Leader(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	switch {
	case l.IsLeader:
		fmt.Println("do the work here")
	case l.HolderAddress != "":
		resp, err := http.Post("http://"+l.HolderAddress+"/work", "application/json", nil) // forward to the leader's app
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Println(string(body))
	default:
		fmt.Println("no leader, or it advertises no address: answer 503 and retry later")
	}
	// Output:
	// done by the leader: POST /work
}
