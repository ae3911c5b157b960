//go:build integration

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/ownership"
	"github.com/leader-elector/leader-elector/partition"
)

// TestPartitionsCheckpointRenewals: an owner checkpoints four partitions
// over and over at the rate limit, under the e2e's short lease settings,
// while every Lease it owns is renewed every retry period on top of the
// checkpoints. No renewal may fail on the resourceVersion a checkpoint
// changed (client-go's slow path, a 409 answer or a read of a Lease), the
// owner never loses a partition or changes its token, and the last
// checkpoint of each partition is still on its Lease after renewals. It
// logs the cost: update requests per checkpoint, and the latency of PUT
// /partitions/<i>/checkpoint.
func TestPartitionsCheckpointRenewals(t *testing.T) {
	t.Parallel()
	g := newPartitionGroup(t, candidateOptions{})
	a := g.join(1)[0]
	g.waitFair("one member", time.Now())
	before, err := a.partitions()
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[int]int64{}
	for _, o := range before.Owned {
		tokens[o.Partition] = o.FencingToken
	}

	// At rest: the owner's Lease updates per second, without checkpoints.
	const window = 6 * time.Second
	rest := scrapeUntil(t, a, func(map[string]*dto.MetricFamily) bool { return true })
	restStart := time.Now()
	waitQuiet(t, window)
	atRest := scrapeUntil(t, a, func(map[string]*dto.MetricFamily) bool { return true })
	atRestAt := time.Now()
	restPuts := requestCount(atRest, "PUT", "") - requestCount(rest, "PUT", "")
	restRate := restPuts / time.Since(restStart).Seconds()

	const partitionsUsed, perPartition = 4, 12
	var (
		mu        sync.Mutex
		latencies []time.Duration
		limited   int
		failures  []string
	)
	start := time.Now()
	var wg sync.WaitGroup
	for p := range partitionsUsed {
		wg.Go(func() {
			client := a.api()
			for k := range perPartition {
				value := fmt.Sprintf("offset=%d", k)
				for {
					sent := time.Now()
					stored, err := client.Checkpoint(context.Background(), p, value)
					took := time.Since(sent)
					var apiErr *api.Error
					if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusTooManyRequests {
						mu.Lock()
						limited++
						mu.Unlock()
						waitQuiet(t, apiErr.RetryAfter)
						continue
					}
					mu.Lock()
					if err != nil {
						failures = append(failures, fmt.Sprintf("partition %d checkpoint %d: %v", p, k, err))
					} else {
						latencies = append(latencies, took)
						if stored.Checkpoint.FencingToken != tokens[p] || stored.Checkpoint.Value != value || stored.Checkpoint.Holder != a.name {
							failures = append(failures, fmt.Sprintf("partition %d checkpoint %d stored as %+v, want %q under token %d", p, k, stored, value, tokens[p]))
						}
					}
					mu.Unlock()
					break
				}
				// At the rate limit's average: one per retry period.
				waitQuiet(t, retryPeriod)
			}
		})
	}
	// Meanwhile the owner must keep every partition with the same token.
	ownership := make(chan string, 1)
	stopWatching := make(chan struct{})
	go func() {
		defer close(ownership)
		for {
			select {
			case <-stopWatching:
				return
			case <-time.After(pollInterval):
			}
			s, err := a.partitions()
			if err != nil {
				ownership <- err.Error()
				return
			}
			if len(s.Owned) != partitionCount {
				ownership <- fmt.Sprintf("owns %d of %d partitions while checkpointing", len(s.Owned), partitionCount)
				return
			}
			for _, o := range s.Owned {
				if tokens[o.Partition] != o.FencingToken {
					ownership <- fmt.Sprintf("partition %d's token went from %d to %d while checkpointing", o.Partition, tokens[o.Partition], o.FencingToken)
					return
				}
			}
		}
	}()
	wg.Wait()
	elapsed := time.Since(start)
	close(stopWatching)
	if why, lost := <-ownership; lost {
		t.Errorf("%s", why)
	}
	for _, f := range failures {
		t.Error(f)
	}
	// Wait until every Lease has been renewed again on top of its last
	// checkpoint.
	leases := controlPlane.AdminClient().CoordinationV1().Leases("default")
	lastCheckpoint := time.Now()
	err = wait.PollUntilContextTimeout(context.Background(), pollInterval, 10*retryPeriod, true, func(ctx context.Context) (bool, error) {
		for p := range partitionsUsed {
			l, err := leases.Get(ctx, partition.PartitionLease(g.lease, p), metav1.GetOptions{})
			if err != nil || l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(lastCheckpoint) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the checkpointed Leases were not renewed after the last checkpoint: %v", err)
	}
	after := scrapeUntil(t, a, func(map[string]*dto.MetricFamily) bool { return true })
	afterAt := time.Now()

	if n := counterSum(after, "leader_election_slowpath_total") - counterSum(atRest, "leader_election_slowpath_total"); n != 0 {
		t.Errorf("%v renewals took client-go's slow path while checkpointing: their optimistic update failed on a checkpoint's resourceVersion", n)
	}
	if n := requestCount(after, "", "409") - requestCount(atRest, "", "409"); n != 0 {
		t.Errorf("%v requests were answered 409 Conflict while checkpointing", n)
	}
	if n := requestCount(after, "GET", "") - requestCount(atRest, "GET", ""); n != 0 {
		t.Errorf("%v reads of the API server while checkpointing, want none (reads come from the watch)", n)
	}
	for p := range partitionsUsed {
		l, err := leases.Get(context.Background(), partition.PartitionLease(g.lease, p), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf(`"value":"offset=%d"`, perPartition-1)
		if got := l.Annotations[partition.CheckpointAnnotation]; !strings.Contains(got, want) {
			t.Errorf("partition %d's Lease after renewals carries %q, want the last checkpoint (%s)", p, got, want)
		}
	}
	s, err := a.partitions()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range s.Owned {
		if o.Partition < partitionsUsed && (o.Checkpoint == nil || o.Checkpoint.Value != fmt.Sprintf("offset=%d", perPartition-1)) {
			t.Errorf("GET /partitions shows partition %d's checkpoint as %+v", o.Partition, o.Checkpoint)
		}
	}

	// Every Lease update is a renewal or a checkpoint's write (the sidecar
	// counts those in its histogram): the renewals' rate while
	// checkpointing, against the rate at rest, shows whether checkpoints
	// cost any request beyond their own write.
	stored := len(latencies)
	writes := histogramCount(after, "leader_elector_partition_checkpoint_duration_seconds") - histogramCount(atRest, "leader_elector_partition_checkpoint_duration_seconds")
	if int(writes) != stored {
		t.Errorf("the sidecar counted %v checkpoint writes, the test %d", writes, stored)
	}
	puts := requestCount(after, "PUT", "") - requestCount(atRest, "PUT", "")
	renewRate := (puts - writes) / afterAt.Sub(atRestAt).Seconds()
	slices.Sort(latencies)
	if stored > 0 {
		t.Logf("MEASURED checkpoints: %d stored in %v (%d answered 429 and retried), 1 update request each; Lease renewals %.1f/s while checkpointing, %.1f/s at rest (%d Leases, retry period %v); no conflict, no read, no slow path; PUT /partitions/<i>/checkpoint latency p50 %v, p99 %v, max %v",
			stored, elapsed.Round(time.Millisecond), limited, renewRate, restRate, partitionCount+1, retryPeriod,
			latencies[stored/2].Round(time.Microsecond), latencies[(stored*99)/100].Round(time.Microsecond), latencies[stored-1].Round(time.Microsecond))
	}
}

// TestPartitionsCheckpointFencing: a new owner reads the previous owner's
// checkpoint; a frozen (SIGSTOP) owner that resumes after its partitions
// moved and tries to checkpoint is refused with 409, and the stored
// checkpoint stays the new owner's. Also the answers to a checkpoint that
// is too large and to checkpoints that come too fast.
func TestPartitionsCheckpointFencing(t *testing.T) {
	t.Parallel()
	g := newPartitionGroup(t, candidateOptions{})
	members := g.join(2)
	g.waitFair("two members", time.Now())
	a, b := members[0], members[1]
	sa, err := a.partitions()
	if err != nil {
		t.Fatal(err)
	}
	p := sa.Owned[0].Partition
	oldToken := sa.Owned[0].FencingToken

	if _, err := a.api().Checkpoint(context.Background(), p, "a-1"); err != nil {
		t.Fatalf("%s checkpoint of partition %d: %v", a.name, p, err)
	}
	// Too large, then too fast (the one above was the first of the burst).
	_, err = a.api().Checkpoint(context.Background(), p, strings.Repeat("x", api.MaxCheckpointBytes+1))
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a checkpoint of %d bytes: %v, want 413", api.MaxCheckpointBytes+1, err)
	}
	var rateLimited *api.Error
	for range ownership.CheckpointBurst + 1 {
		if _, err = a.api().Checkpoint(context.Background(), p, "a-1"); err != nil {
			break
		}
	}
	if !errors.As(err, &rateLimited) || rateLimited.StatusCode != http.StatusTooManyRequests || rateLimited.RetryAfter < time.Second {
		t.Errorf("checkpoints in a row: %v, want 429 with a Retry-After", err)
	}

	// Freeze a: its partitions expire and b takes them all.
	start := time.Now()
	a.signal(syscall.SIGSTOP)
	g.setStopped(a, true)
	g.waitFair("SIGSTOP 2→1", start)
	sb, err := b.partitions()
	if err != nil {
		t.Fatal(err)
	}
	var taken *api.OwnedPartition
	for i := range sb.Owned {
		if sb.Owned[i].Partition == p {
			taken = &sb.Owned[i]
		}
	}
	if taken == nil || taken.Checkpoint == nil || taken.Checkpoint.Value != "a-1" || taken.Checkpoint.Holder != a.name || taken.Checkpoint.FencingToken != oldToken {
		t.Fatalf("%s took partition %d: %+v, want it with %s's checkpoint a-1 under token %d", b.name, p, taken, a.name, oldToken)
	}
	if taken.FencingToken <= oldToken {
		t.Errorf("new token %d, want above %d", taken.FencingToken, oldToken)
	}
	if _, err := b.api().Checkpoint(context.Background(), p, "b-1"); err != nil {
		t.Fatalf("%s checkpoint: %v", b.name, err)
	}

	// a resumes and at once tries to checkpoint the partition it lost.
	a.signal(syscall.SIGCONT)
	g.setStopped(a, false)
	_, err = a.api().Checkpoint(context.Background(), p, "a-late")
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict || apiErr.Reason == "" {
		t.Errorf("the resumed %s's checkpoint of partition %d: %v, want 409 with a reason", a.name, p, err)
	} else {
		t.Logf("the resumed owner's checkpoint was refused: %s (reason %s)", apiErr.Message, apiErr.Reason)
	}
	l, err := controlPlane.AdminClient().CoordinationV1().Leases("default").Get(context.Background(), partition.PartitionLease(g.lease, p), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Annotations[partition.CheckpointAnnotation]; !strings.Contains(got, `"value":"b-1"`) || !strings.Contains(got, fmt.Sprintf(`"holder":%q`, b.name)) {
		t.Errorf("partition %d's stored checkpoint %q, want %s's b-1", p, got, b.name)
	}
	g.waitFair("SIGCONT 1→2", time.Now())
}

// waitQuiet lets d pass (pacing requests, not waiting for a condition).
func waitQuiet(t *testing.T, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	<-ctx.Done()
}

// requestCount sums rest_client_requests_total over the series with the
// given method and code ("" for any).
func requestCount(fams map[string]*dto.MetricFamily, method, code string) float64 {
	want := map[string]string{}
	if method != "" {
		want["method"] = method
	}
	if code != "" {
		want["code"] = code
	}
	var sum float64
	for _, s := range fams["rest_client_requests_total"].GetMetric() {
		if labelsMatch(s, want) {
			sum += s.GetCounter().GetValue()
		}
	}
	return sum
}

// histogramCount sums the observation counts of every series of a
// histogram.
func histogramCount(fams map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	for _, s := range fams[name].GetMetric() {
		sum += float64(s.GetHistogram().GetSampleCount())
	}
	return sum
}

// counterSum sums every series of a counter.
func counterSum(fams map[string]*dto.MetricFamily, name string) float64 {
	var sum float64
	for _, s := range fams[name].GetMetric() {
		sum += s.GetCounter().GetValue()
	}
	return sum
}

func labelsMatch(s *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range s.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
