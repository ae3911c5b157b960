//go:build integration

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestPartitionsRBACAndAPI runs two members with the ServiceAccount token
// bound only by the chart's partition-mode Role (so that Role is enough),
// and checks the API of partition mode: GET /partitions and its long-poll,
// the SSE event, POST /partitions/<i>/release and its errors, /readyz, and
// that /leader is not served.
func TestPartitionsRBACAndAPI(t *testing.T) {
	t.Parallel()
	const namespace = "partitions-rbac"
	objs, err := packaging.HelmTemplate(context.Background(), packaging.ChartDir(), "parts", namespace, packaging.WithImage("--set", fmt.Sprintf("partitions.count=%d", partitionCount))...)
	if err != nil {
		t.Fatal(err)
	}
	var role rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	kubeconfig, _ := applyRBAC(t, namespace, role.Rules, true)

	g := newPartitionGroup(t, candidateOptions{namespace: namespace, kubeconfig: kubeconfig})
	members := g.join(2)
	g.waitFair("two members with the chart's Role", time.Now())
	a, b := members[0], members[1]

	for _, c := range members {
		if status, body, err := c.probe("/readyz"); err != nil || status != http.StatusOK {
			t.Errorf("%s /readyz: %d %q %v, want 200 with its fair share", c.name, status, body, err)
		}
	}
	before, err := a.partitions()
	if err != nil {
		t.Fatal(err)
	}
	notOwned := -1
	owned := map[int]bool{}
	for _, o := range before.Owned {
		owned[o.Partition] = true
	}
	for i := range partitionCount {
		if !owned[i] {
			notOwned = i
			break
		}
	}
	mine := before.Owned[0]

	errorCases := []struct {
		method, path string
		status       int
		want         string
	}{
		{http.MethodPost, fmt.Sprintf("/partitions/%d/release", partitionCount), http.StatusNotFound, "no such partition"},
		{http.MethodPost, "/partitions/-1/release", http.StatusNotFound, "no such partition"},
		{http.MethodPost, "/partitions/three/release", http.StatusNotFound, "want a number"},
		{http.MethodPost, "/partitions/1/renew", http.StatusNotFound, "no such path"},
		{http.MethodPost, fmt.Sprintf("/partitions/%d/release", notOwned), http.StatusConflict, "does not own"},
		{http.MethodGet, "/partitions/1/release", http.StatusMethodNotAllowed, "not allowed"},
		{http.MethodGet, "/partitions?wait=soon", http.StatusBadRequest, "invalid wait"},
		{http.MethodGet, "/leader", http.StatusNotFound, "partition mode"},
		{http.MethodPost, "/release", http.StatusNotFound, "partition mode"},
		// Other spellings of a partition this pod owns, and a malformed
		// query string, release nothing: the release of it below succeeds.
		{http.MethodPost, fmt.Sprintf("/partitions/0%d/release", mine.Partition), http.StatusNotFound, "canonical decimal"},
		{http.MethodPost, fmt.Sprintf("/partitions/+%d/release", mine.Partition), http.StatusNotFound, "canonical decimal"},
		{http.MethodPost, fmt.Sprintf("/partitions/%d/release?%%", mine.Partition), http.StatusBadRequest, "malformed query string"},
	}
	for _, tc := range errorCases {
		status, header, body, err := a.do(tc.method, tc.path, nil)
		if err != nil || status != tc.status || !strings.Contains(string(body), tc.want) || header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %s %q, want %d with %q as JSON (err %v)", tc.method, tc.path, status, header.Get("Content-Type"), body, tc.status, tc.want, err)
		}
	}

	// A long-poll waits for the next revision; the release makes one.
	polled := make(chan api.Partitions, 1)
	go func() {
		client := api.NewClient(a.apiURL, &http.Client{Timeout: 30 * time.Second})
		s, _ := client.WaitPartitions(context.Background(), before.Revision, 20*time.Second)
		polled <- s
	}()
	events := firstEvent(t, a)
	if !strings.Contains(events, "\nevent: partitions\n") || !strings.Contains(events, `"owned":[`) {
		t.Errorf("GET /events: first event %q, want event: partitions with the state", events)
	}

	after, err := a.api().ReleasePartition(context.Background(), mine.Partition)
	if err != nil {
		t.Fatalf("release partition %d: %v", mine.Partition, err)
	}
	for _, o := range after.Owned {
		if o.Partition == mine.Partition {
			t.Errorf("partition %d still listed after its release: %+v", mine.Partition, after)
		}
	}
	select {
	case s := <-polled:
		if s.Revision <= before.Revision {
			t.Errorf("long-poll answered revision %d, want more than %d", s.Revision, before.Revision)
		}
	case <-time.After(25 * time.Second):
		t.Errorf("the long-poll did not answer")
	}
	// Both members hold their share, so nobody takes it until the
	// releasing member's sit-out of one lease duration ends; then it is
	// owned again, with a new fencing token (the monitor checks that).
	g.waitFair("after POST /partitions/<i>/release", time.Now())

	// A graceful leave deletes the membership Lease, with that Role too.
	b.signal(syscall.SIGTERM)
	if code, err := b.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("%s: exit %d, %v", b.name, code, err)
	}
	checkMembershipLeases(t, namespace, g.lease, a)
	for _, c := range []*candidate{a, b} {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something with the chart's partition Role:\n%s", c.name, c.log())
		}
	}
}

// firstEvent reads GET /events until the first blank line.
func firstEvent(t *testing.T, c *candidate) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.apiURL+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET /events: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && sc.Text() != "" {
		b.WriteString(sc.Text() + "\n")
	}
	return b.String()
}
