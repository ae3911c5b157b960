package apitest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/api/apitest"
)

// follow is the app under test: it follows GET /events, starts its leader
// work when isLeader turns true, with the term's fencing token, and stops
// it at "event: lost". It reports what it does on out.
func follow(ctx context.Context, baseURL string, out chan<- string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/events", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	event, working := "", false
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
		}
		data, ok := strings.CutPrefix(line, "data: ")
		switch {
		case !ok:
		case event == "lost":
			var lost api.Lost
			_ = json.Unmarshal([]byte(data), &lost)
			working = false
			out <- fmt.Sprintf("stopped the work of term %d: %s", lost.FencingToken, lost.Reason)
		case event == "leader":
			var l api.Leader
			_ = json.Unmarshal([]byte(data), &l)
			if l.IsLeader && !working {
				working = true
				out <- fmt.Sprintf("working under fencing token %d", l.FencingToken)
			} else if !l.IsLeader {
				out <- fmt.Sprintf("following %q", l.Holder)
			}
		}
	}
	return lines.Err()
}

// An app's unit test: the fake sidecar makes the app's pod lead, then
// lose its term, and the test checks that the app started and stopped
// its leader work. In a test, pass t to New instead of nil: it is then
// closed when the test ends.
func Example() {
	s := apitest.New(nil, apitest.Config{Identity: "my-app-0"})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan string)
	go func() { _ = follow(ctx, s.URL, out) }()

	fmt.Println(<-out) // the state at connect time: no one leads
	s.Lead(7, time.Minute)
	fmt.Println(<-out)
	s.Lose(api.ChangeRenewDeadline) // as when the sidecar cannot renew
	fmt.Println(<-out)
	fmt.Println(<-out) // the state after the lost event
	s.SetHolder("my-app-1", 8)
	fmt.Println(<-out)
	// Output:
	// following ""
	// working under fencing token 7
	// stopped the work of term 7: renew-deadline
	// following "my-app-0"
	// following "my-app-1"
}

// work is the partition worker under test: it resumes partition i from
// its checkpoint and stores the next one under the term it owns i in, so
// that a worker left over from an earlier term cannot overwrite it.
func work(ctx context.Context, c *api.Client, i int) (string, error) {
	p, err := c.Partitions(ctx)
	if err != nil {
		return "", err
	}
	for _, o := range p.Owned {
		if o.Partition != i {
			continue
		}
		from := "start"
		if o.Checkpoint != nil {
			from = o.Checkpoint.Value
		}
		next := from + "+1"
		_, err := c.CheckpointTerm(ctx, i, o.FencingToken, next)
		return next, err
	}
	return "", fmt.Errorf("partition %d is not owned", i)
}

// An app's unit test in partition mode: the fake makes the pod own
// partition 2 with an earlier owner's checkpoint; the worker resumes from
// it and checkpoints under its term, and the test asserts on what was
// stored and on the calls the app made.
func Example_partitions() {
	s := apitest.New(nil, apitest.Config{Partitions: 4})
	defer s.Close()
	s.SetCheckpoint(2, "offset=40", "my-app-1", 4)
	s.Own(2, 5, time.Minute)
	ctx := context.Background()

	value, err := work(ctx, s.Client(), 2)
	fmt.Println(value, err)
	stored, _ := s.Checkpoint(2)
	fmt.Println(stored.Value, stored.FencingToken)
	call := s.CallsTo(http.MethodPut, "/partitions/2/checkpoint")[0]
	fmt.Println(call.Query.Get("fencingToken"), call.Body)

	// A worker left over from term 4 is refused, and stores nothing.
	_, err = s.Client().CheckpointTerm(ctx, 2, 4, "stale")
	var refused *api.Error
	fmt.Println(errors.As(err, &refused), refused.StatusCode, refused.Reason)
	// Output:
	// offset=40+1 <nil>
	// offset=40+1 5
	// 5 offset=40+1
	// true 409 term-changed
}
