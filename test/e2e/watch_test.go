//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestWatchers: an app watching a follower over SSE and long-poll learns
// about the handover as it happens, and clients that never read do not hold
// anything up.
func TestWatchers(t *testing.T) {
	t.Parallel()
	g := newGroup(t, 2, candidateOptions{})
	leader := g.WaitLeader(giveUp)
	var follower *candidate
	for _, c := range g.Members() {
		if c != leader {
			follower = c
		}
	}
	harnesstest.WaitFollowing(t, follower, leader)
	before, err := follower.state()
	if err != nil {
		t.Fatal(err)
	}

	// Clients that connect to the stream and never read from it.
	for range 20 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(follower.apiURL, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /events HTTP/1.1\r\nHost: x\r\n\r\n")
	}

	// An SSE client that reads.
	resp, err := http.Get(follower.apiURL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	events := make(chan api.Leader, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "leader":
				var s api.Leader
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &s) == nil {
					events <- s
				}
			}
		}
		close(events)
	}()
	first := <-events
	if first.IsLeader || first.Holder != leader.name {
		t.Errorf("first event: %+v", first)
	}

	// A long-poll that waits for the next change after the current revision.
	type result struct {
		s   api.Leader
		at  time.Time
		err error
	}
	polled := make(chan result, 1)
	go func() {
		c := api.NewClient(follower.apiURL, &http.Client{Timeout: 40 * time.Second})
		s, err := c.WaitLeader(context.Background(), before.Revision, 30*time.Second)
		polled <- result{s, time.Now(), err}
	}()

	// No need to wait for the long-poll to be parked: it asks for any
	// revision other than the one it had, so it answers at once if the
	// handover is already under way when it arrives.
	sent := time.Now()
	leader.signal(syscall.SIGTERM)

	lp := <-polled
	if lp.err != nil {
		t.Fatal(lp.err)
	}
	if lp.s.Revision == before.Revision {
		t.Errorf("long-poll returned the revision it waited past: %+v", lp.s)
	}
	t.Logf("long-poll answered %v after SIGTERM: holder %q isLeader %v revision %d", lp.at.Sub(sent).Round(time.Millisecond), lp.s.Holder, lp.s.IsLeader, lp.s.Revision)

	deadline := time.After(handoverBound)
	for {
		select {
		case s, ok := <-events:
			if !ok {
				t.Fatal("event stream ended")
			}
			if s.IsLeader {
				t.Logf("SSE: follower learned it leads %v after SIGTERM (token %d)", time.Since(sent).Round(time.Millisecond), s.FencingToken)
				return
			}
		case <-deadline:
			t.Fatal("no SSE event with isLeader true after the handover")
		}
	}
}
