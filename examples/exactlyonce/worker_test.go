package exactlyonce

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api/apitest"
)

// RunPartition, as a supervised child: it resumes after the partition's
// checkpoint, skips what the sink already has, and on drain stores the
// sink's offset as the last checkpoint and returns without releasing (the
// supervisor releases after the child's exit, so its successor never runs
// beside it).
func TestRunPartitionDrainsWithoutReleasing(t *testing.T) {
	dir := t.TempDir()
	var stream strings.Builder
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&stream, "item-%d\n", i)
	}
	if err := os.WriteFile(SourcePath(dir, 2), []byte(stream.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := apitest.New(t, apitest.Config{Partitions: 4, Identity: "pod-a"})
	fake.Own(2, 7, time.Minute)
	fake.SetCheckpoint(2, CheckpointValue(5), "pod-b", 6)
	sink := NewMemorySink()
	ctx := context.Background()
	// The previous owner (token 6) applied up to 8 but checkpointed 5.
	for off := int64(1); off <= 8; off++ {
		if _, err := sink.Apply(ctx, 2, 6, off, fmt.Sprintf("item-%d", off)); err != nil {
			t.Fatal(err)
		}
	}
	c := Config{Sidecar: fake.Client(), Source: dir, Sink: sink, CheckpointEvery: 1000, Poll: time.Millisecond,
		Log: slog.New(slog.DiscardHandler)}
	drain := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- RunPartition(ctx, c, 2, 7, drain) }()
	deadline := time.Now().Add(10 * time.Second)
	for sink.State(2).Offset < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("the sink reached offset %d of 20 in 10 s", sink.State(2).Offset)
		}
		time.Sleep(time.Millisecond)
	}
	close(drain)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("RunPartition: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunPartition did not return within 10 s of the drain")
	}
	res := sink.Results(2)
	if len(res) != 20 {
		t.Fatalf("%d results in the sink, want 20", len(res))
	}
	for k, r := range res {
		wantToken := int64(6)
		if k >= 8 {
			wantToken = 7
		}
		if r.Offset != int64(k+1) || r.Value != fmt.Sprintf("item-%d", k+1) || r.Token != wantToken {
			t.Errorf("result %d: %+v, want offset %d under token %d", k, r, k+1, wantToken)
		}
	}
	if cp, ok := fake.Checkpoint(2); !ok || cp.Value != CheckpointValue(20) || cp.FencingToken != 7 {
		t.Errorf("checkpoint %+v (stored %v), want %q under token 7", cp, ok, CheckpointValue(20))
	}
	if calls := fake.CallsTo("POST", "/partitions/2/release"); len(calls) != 0 {
		t.Errorf("the child released the partition itself (%d calls): the supervisor is to, after its exit", len(calls))
	}
	if owned := fake.Partitions().Owned; len(owned) != 1 || owned[0].Partition != 2 {
		t.Errorf("owned %+v, want partition 2 still owned", owned)
	}
}

// A child started for a term its pod no longer holds has nothing to do.
func TestRunPartitionNotOwned(t *testing.T) {
	fake := apitest.New(t, apitest.Config{Partitions: 4})
	fake.Own(1, 3, time.Minute)
	c := Config{Sidecar: fake.Client(), Source: t.TempDir(), Sink: NewMemorySink(), CheckpointEvery: 1, Poll: time.Millisecond,
		Log: slog.New(slog.DiscardHandler)}
	for _, term := range []struct {
		partition int
		token     int64
	}{{1, 2}, {2, 3}} {
		if err := RunPartition(context.Background(), c, term.partition, term.token, nil); err != nil {
			t.Errorf("partition %d token %d: %v, want nil", term.partition, term.token, err)
		}
	}
	if calls := fake.Calls(); len(calls) != 2 {
		t.Errorf("%d calls, want 2 (one GET /partitions each): %+v", len(calls), calls)
	}
}
