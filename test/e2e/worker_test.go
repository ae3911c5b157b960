//go:build integration

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/examples/worker"
)

// TestReadmeWorker runs the partition worker of docs/partitions.md (examples/worker)
// against a real sidecar in partition mode: it consumes every partition the
// sidecar owns, and when the sidecar is frozen (SIGSTOP) every consumer stops
// by the validUntil of its last answer — never after it. docs/partitions.md
// must show the example's code as it is.
func TestReadmeWorker(t *testing.T) {
	checkDocsShowWorker(t)

	g := newPartitionGroup(t, candidateOptions{})
	sidecar := g.join(1)[0]
	g.waitFair("one member", time.Now())

	type consumer struct {
		running bool
		stopped time.Time
	}
	var mu sync.Mutex
	consumers := map[int]*consumer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, sidecar.apiURL, func(ctx context.Context, partition int, token int64) {
			mu.Lock()
			consumers[partition] = &consumer{running: true}
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			consumers[partition].running, consumers[partition].stopped = false, time.Now()
			mu.Unlock()
		})
	}()
	defer func() {
		cancel()
		<-done
	}()
	runningCount := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range consumers {
			if c.running {
				n++
			}
		}
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		return runningCount() == partitionCount, nil
	}); err != nil {
		t.Fatalf("%d of %d partitions consumed", runningCount(), partitionCount)
	}

	sidecar.signal(syscall.SIGSTOP)
	frozen := time.Now()
	defer sidecar.signal(syscall.SIGCONT)
	// A frozen sidecar renews nothing: every claim it made ends by one
	// renew deadline after the freeze, and so must every consumer.
	bound := frozen.Add(renewDeadline)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 3*renewDeadline, true, func(context.Context) (bool, error) {
		return runningCount() == 0, nil
	}); err != nil {
		t.Fatalf("%d consumers still run %v after the sidecar was frozen", runningCount(), time.Since(frozen))
	}
	mu.Lock()
	defer mu.Unlock()
	for p, c := range consumers {
		if c.stopped.After(bound.Add(100 * time.Millisecond)) {
			t.Errorf("partition %d's consumer stopped at %v, after the claim's validUntil %v", p, c.stopped, bound)
		}
	}
	t.Logf("MEASURED README worker: consumers stopped %v after the sidecar froze", time.Since(frozen).Round(time.Millisecond))
}

// checkDocsShowWorker fails unless the worker in docs/partitions.md is the
// example's code between its README markers.
func checkDocsShowWorker(t *testing.T) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(repoRoot, "examples", "worker", "worker.go"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, _ := strings.Cut(string(src), "// README: begin\n")
	code, _, _ := strings.Cut(after, "// README: end")
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "partitions.md"))
	if err != nil {
		t.Fatal(err)
	}
	if code = strings.TrimSpace(code); code == "" || !strings.Contains(string(doc), "```go\n"+code+"\n```") {
		t.Errorf("docs/partitions.md does not show examples/worker/worker.go's Run as it is; copy it between the README markers:\n%s", code)
	}
}
