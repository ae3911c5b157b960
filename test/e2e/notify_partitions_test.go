//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// waitForCond polls cond every pollInterval until it holds or within passes.
func waitForCond(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), pollInterval, within, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// partitionsReceiver is an app that records the partition-mode change
// notifications it gets, in arrival order.
type partitionsReceiver struct {
	mu  sync.Mutex
	got []api.Partitions
	url string
}

func newPartitionsReceiver(t *testing.T) *partitionsReceiver {
	rc := &partitionsReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var p api.Partitions
		rev, revErr := strconv.ParseUint(r.Header.Get("Leader-Elector-Revision"), 10, 64)
		if err != nil || revErr != nil || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &p) != nil || p.Revision != rev {
			t.Errorf("receiver: malformed notification: %s %v %q", r.Method, r.Header, body)
		}
		rc.mu.Lock()
		rc.got = append(rc.got, p)
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/partitions-changed"
	return rc
}

func (rc *partitionsReceiver) notifications() []api.Partitions {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]api.Partitions(nil), rc.got...)
}

// checkInOrder fails the test unless the revisions grow strictly.
func (rc *partitionsReceiver) checkInOrder(t *testing.T, who string) {
	t.Helper()
	got := rc.notifications()
	if len(got) == 0 {
		t.Errorf("%s: no notification", who)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Revision <= got[i-1].Revision {
			t.Errorf("%s: revision %d notified after %d", who, got[i].Revision, got[i-1].Revision)
		}
	}
}

// ownedTokens is partition → fencing token.
func ownedTokens(p api.Partitions) map[int]int64 {
	out := map[int]int64{}
	for _, o := range p.Owned {
		out[o.Partition] = o.FencingToken
	}
	return out
}

// TestPartitionsChangeNotifications: two members with --on-change-url on
// the real API server, a join and a graceful leave. Each app gets the GET
// /partitions JSON, in revision order; a running member's last
// notification is its GET /partitions (same revision, partitions, tokens);
// the member that left was told last that it owns nothing.
func TestPartitionsChangeNotifications(t *testing.T) {
	t.Parallel()
	g := newPartitionGroup(t, candidateOptions{})
	join := func() (*candidate, *partitionsReceiver) {
		rc := newPartitionsReceiver(t)
		opts := g.opts
		opts.extraArgs = append(append([]string(nil), opts.extraArgs...), "--on-change-url="+rc.url)
		g.mu.Lock()
		name := fmt.Sprintf("%s-%d", g.lease, g.next)
		g.next++
		g.mu.Unlock()
		c := startCandidate(t, name, opts)
		g.mu.Lock()
		g.members = append(g.members, c)
		g.mu.Unlock()
		return c, rc
	}
	a, appA := join()
	g.waitFair("one member", time.Now())
	b, appB := join()
	g.waitFair("join 1→2", time.Now())

	// The running member's app catches up with GET /partitions.
	caughtUp := func(c *candidate, rc *partitionsReceiver) bool {
		s, err := c.partitions()
		got := rc.notifications()
		return err == nil && len(got) > 0 && got[len(got)-1].Revision == s.Revision && reflect.DeepEqual(ownedTokens(got[len(got)-1]), ownedTokens(s))
	}
	waitForCond(t, "a's app to be told its share of two", settleBound, func() bool { return caughtUp(a, appA) })
	waitForCond(t, "b's app to be told its share of two", settleBound, func() bool { return caughtUp(b, appB) })

	b.signal(syscall.SIGTERM)
	if _, err := b.waitExit(settleBound); err != nil {
		t.Fatalf("%s did not exit after SIGTERM: %v", b.name, err)
	}
	g.setStopped(b, true)
	g.waitFair("leave 2→1", time.Now())
	waitForCond(t, "a's app to be told it owns every partition", settleBound, func() bool {
		return caughtUp(a, appA) && len(ownedTokens(appA.notifications()[len(appA.notifications())-1])) == partitionCount
	})
	last := appB.notifications()
	if n := len(last); n == 0 || len(last[n-1].Owned) != 0 {
		t.Errorf("%s's app was not told last that it owns nothing: %+v", b.name, last)
	}
	appA.checkInOrder(t, a.name)
	appB.checkInOrder(t, b.name)
	t.Logf("%s: %d notifications; %s: %d", a.name, len(appA.notifications()), b.name, len(appB.notifications()))
}
