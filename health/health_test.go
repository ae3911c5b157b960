package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestThresholds(t *testing.T) {
	th := thresholds{failures: 3, successes: 2}
	steps := []struct {
		ok          bool
		wantChanged bool
		wantHealthy bool
	}{
		// Starts unhealthy: two successes in a row make it healthy.
		{true, false, false},
		{false, false, false},
		{true, false, false},
		{true, true, true},
		// Three failures in a row make it unhealthy; a success between
		// them starts the count again.
		{false, false, true},
		{false, false, true},
		{true, false, true},
		{false, false, true},
		{false, false, true},
		{false, true, false},
		{false, false, false},
	}
	for i, s := range steps {
		if changed := th.record(s.ok); changed != s.wantChanged || th.healthy != s.wantHealthy {
			t.Fatalf("step %d (ok=%v): changed=%v healthy=%v, want %v %v", i, s.ok, changed, th.healthy, s.wantChanged, s.wantHealthy)
		}
	}
}

func TestProbe(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "/", http.StatusFound)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	client := newProbeClient(time.Second)
	ctx := context.Background()
	for _, tc := range []struct {
		path   string
		status int
		ok     bool
	}{{"/", 200, true}, {"/", 204, true}, {"/", 299, true}, {"/", 300, false}, {"/", 500, false}, {"/", 404, false}, {"/redirect", 200, false}} {
		status = tc.status
		err := probe(ctx, client, srv.URL+tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("%s answering %d: err = %v, want ok=%v", tc.path, tc.status, err, tc.ok)
		}
	}
	srv.Close()
	if err := probe(ctx, client, srv.URL); err == nil {
		t.Error("a closed server counts as healthy")
	}
}

func TestDecide(t *testing.T) {
	probeErr := errors.New("GET http://127.0.0.1:1/ answered 503 Service Unavailable")
	for _, tc := range []struct {
		name            string
		healthy, leader bool
		mayStepDown     bool
		others          []string
		want            decision
	}{
		{"healthy leader", true, true, false, nil, decision{}},
		{"healthy follower", true, false, false, []string{"b"}, decision{}},
		{"unhealthy follower", false, false, true, nil, decision{}},
		{"unhealthy follower, others healthy", false, false, true, []string{"b"}, decision{}},
		{"unhealthy leader, another healthy", false, true, true, []string{"b"}, decision{stepDown: true}},
		{"unhealthy leader, another healthy, failing only just", false, true, false, []string{"b"}, decision{}},
		{"unhealthy leader, no one healthy", false, true, true, nil, decision{degraded: "app unhealthy (" + probeErr.Error() + "); no healthy candidate to take over"}},
	} {
		if got := decide(tc.healthy, tc.leader, tc.mayStepDown, tc.others, probeErr); got != tc.want {
			t.Errorf("%s: decide = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func candidatesLease(raw string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app-candidates"}}
	if raw != "" {
		l.Annotations = map[string]string{CandidatesAnnotation: raw}
	}
	return l
}

func TestRegistryEntries(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	r := newRegistry("ns", "app-candidates", "a", 10*time.Second, nil, nil, clk, nil)

	// Entries count from the first read: no heartbeat proves a candidate
	// alive, its taking the Lease at a handover does.
	r.observe(candidatesLease(`{"a":{"healthy":false,"seq":1},"b":{"healthy":true,"ok":true,"seq":5},"c":{"healthy":true,"ok":true,"seq":2}}`))
	if got, want := r.healthyOthers(), []string{"b", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first read: %v, want %v", got, want)
	}
	clk.Step(time.Second)
	r.observe(candidatesLease(`{"a":{"healthy":false,"seq":1},"b":{"healthy":true,"ok":true,"seq":6},"c":{"healthy":true,"ok":true,"seq":2},"d":{"healthy":true,"ok":true,"seq":1},"e":{"healthy":false,"seq":1}}`))
	if got, want := r.healthyOthers(), []string{"b", "c", "d"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after b changed and d appeared: %v, want %v", got, want)
	}
	// An entry unchanged for staleAfter still counts: it is not written
	// unless it changes. Pruning removes it (below).
	clk.Step(10 * time.Second)
	if got, want := r.healthyOthers(), []string{"b", "c", "d"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after 10s without writes: %v, want %v", got, want)
	}
	// A candidate whose last probe failed is not able to take over, even
	// before its thresholds count it unhealthy.
	r.observe(candidatesLease(`{"a":{"healthy":false,"seq":1},"b":{"healthy":true,"ok":true,"seq":6},"d":{"healthy":true,"ok":false,"seq":3}}`))
	if got, want := r.healthyOthers(), []string{"b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after d's probe failed and c left: %v, want %v", got, want)
	}
	// An entry that says unhealthy removes the candidate at once.
	r.observe(candidatesLease(`{"a":{"healthy":false,"seq":1},"b":{"healthy":true,"ok":true,"seq":6},"d":{"healthy":false,"seq":4}}`))
	if got, want := r.healthyOthers(), []string{"b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after d turned unhealthy: %v, want %v", got, want)
	}
	// Pruning drops the entries no one wrote for staleAfter (b, written 11s
	// ago), keeps its own and those it has not judged yet (x: not seen yet).
	got := r.prune(map[string]entry{"a": {Seq: 1}, "b": {Healthy: true, Seq: 6}, "d": {Seq: 4}, "x": {Seq: 1}})
	if want := map[string]entry{"a": {Seq: 1}, "d": {Seq: 4}, "x": {Seq: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("prune = %v, want %v", got, want)
	}
	// An entry never seen to change (c, there at the first read: its pod
	// died before this process started) is pruned staleAfter after it was
	// first seen, so that crashed pods' entries do not pile up.
	c := r2(t)
	clk2 := c.clock.(*clocktesting.FakeClock)
	c.observe(candidatesLease(`{"a":{"seq":1},"c":{"healthy":true,"ok":true,"seq":2}}`))
	clk2.Step(9 * time.Second)
	if got := c.prune(decode(candidatesLease(`{"a":{"seq":1},"c":{"healthy":true,"ok":true,"seq":2}}`))); len(got) != 2 {
		t.Errorf("c pruned before staleAfter: %v", got)
	}
	clk2.Step(time.Second)
	if got, want := c.prune(decode(candidatesLease(`{"a":{"seq":1},"c":{"healthy":true,"ok":true,"seq":2}}`))), map[string]entry{"a": {Seq: 1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("prune = %v, want %v", got, want)
	}
}

// TestRegistryDrop: drop removes the entries still at the Seq given (a
// candidate that wrote since is alive), writes nothing when none is, and a
// candidate whose own entry was removed is told (ownMissing).
func TestRegistryDrop(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(candidatesLease(`{"b":{"healthy":true,"ok":true,"seq":3},"c":{"healthy":true,"ok":true,"seq":5}}`))
	r := newRegistry("ns", "app-candidates", "a", time.Hour, client, client, clk, nil)
	ctx := context.Background()
	if err := r.publish(ctx, entry{Healthy: true, OK: true}, false); err != nil {
		t.Fatal(err)
	}
	var writes int
	client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		writes++
		return false, nil, nil
	})
	// c wrote since (seq 5, not 4): alive, kept.
	if err := r.drop(ctx, map[string]int64{"b": 3, "c": 4}); err != nil {
		t.Fatal(err)
	}
	got := decode(mustGet(t, client))
	if _, ok := got["b"]; ok || got["c"].Seq != 5 || got["a"].Seq != 1 {
		t.Errorf("after drop: %v, want b removed, c and a kept", got)
	}
	if err := r.drop(ctx, map[string]int64{"b": 3, "c": 4, "a": 1}); err != nil || writes != 1 {
		t.Errorf("a drop with nothing to remove (never its own entry): %d writes, %v; want none", writes-1, err)
	}
	// The watch delivers a version older than a's first write: not a
	// removal, a is not told.
	missing := 0
	r.ownMissing = func() { missing++ }
	r.observe(candidatesLease(`{"b":{"healthy":true,"ok":true,"seq":3},"c":{"healthy":true,"ok":true,"seq":5}}`))
	if missing != 0 {
		t.Errorf("ownMissing called %d times for a version from before a's write, want 0", missing)
	}
	// Once the watch showed a's entry, someone removes it: a is told, once
	// per version without it.
	r.observe(mustGet(t, client))
	r.observe(candidatesLease(`{"c":{"healthy":true,"ok":true,"seq":5}}`))
	if missing != 1 {
		t.Errorf("ownMissing called %d times, want 1", missing)
	}
}

// r2 is a registry of "a" with staleAfter 10s on a fake clock.
func r2(t *testing.T) *registry {
	t.Helper()
	return newRegistry("ns", "app-candidates", "a", 10*time.Second, nil, nil, clocktesting.NewFakeClock(time.Unix(1000, 0)), nil)
}

func TestRegistryPublish(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	client := fake.NewClientset(candidatesLease(`{"b":{"healthy":true,"ok":true,"seq":3},"a":{"healthy":true,"ok":true,"seq":7}}`))
	r := newRegistry("ns", "app-candidates", "a", 10*time.Second, client, client, clk, nil)
	ctx := context.Background()
	if err := r.publish(ctx, entry{Healthy: true}, false); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		l, err := client.CoordinationV1().Leases("ns").Get(ctx, "app-candidates", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return l.Annotations[CandidatesAnnotation]
	}
	// The sequence goes on from a previous incarnation's entry.
	if got, want := read(), `{"a":{"healthy":true,"ok":false,"seq":8},"b":{"healthy":true,"ok":true,"seq":3}}`; got != want {
		t.Errorf("after publish: %s, want %s", got, want)
	}
	if err := r.publish(ctx, entry{}, true); err != nil {
		t.Fatal(err)
	}
	if got := read(); strings.Contains(got, `"a"`) {
		t.Errorf("after removal: %s still has a", got)
	}
	// A missing candidates Lease is an error the caller reports (the
	// sidecar may not create it).
	r = newRegistry("ns", "other-candidates", "a", 10*time.Second, client, client, clk, nil)
	if err := r.publish(ctx, entry{Healthy: true, OK: true}, false); err == nil {
		t.Error("publish to a missing Lease succeeded")
	}
}
