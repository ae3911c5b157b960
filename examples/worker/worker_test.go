package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api/apitest"
	"github.com/leader-elector/leader-elector/examples/worker"
)

// answerSlack bounds how long the worker may take to act on a change the
// fake sidecar made: the fake answers the worker's long-poll at once, so
// this is one loopback round trip and a goroutine's start, with room for a
// loaded machine.
const answerSlack = 2 * time.Second

// consumerEvent is a consumer of the worker starting or stopping.
type consumerEvent struct {
	started   bool
	partition int
	token     int64
}

func (e consumerEvent) String() string {
	verb := "stopped"
	if e.started {
		verb = "started"
	}
	return fmt.Sprintf("%s partition %d in term %d", verb, e.partition, e.token)
}

// TestWorkerFollowsOwnership is how an app tests its partition logic
// without a cluster: the fake sidecar of package apitest makes this pod own
// partitions, take one away, let one's claim run out and give one back in
// a new term, and the test checks that the worker runs exactly the
// consumers the pod's claims allow, each with its term's fencing token.
func TestWorkerFollowsOwnership(t *testing.T) {
	s := apitest.New(t, apitest.Config{Partitions: 4})
	events := make(chan consumerEvent, 16)
	consume := func(ctx context.Context, partition int, token int64) {
		events <- consumerEvent{true, partition, token}
		<-ctx.Done()
		events <- consumerEvent{false, partition, token}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, s.URL, consume) }()
	ended := false
	defer func() { // also when a check ends the test early
		if !ended {
			cancel()
			<-done
		}
	}()

	expect := func(want ...consumerEvent) {
		t.Helper()
		got := map[string]bool{}
		for range want {
			select {
			case e := <-events:
				got[e.String()] = true
			case <-time.After(answerSlack):
				t.Fatalf("waited %v for %v; saw %v", answerSlack, want, got)
			}
		}
		for _, w := range want {
			if !got[w.String()] {
				t.Fatalf("want %v, saw %v", want, got)
			}
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case e := <-events:
			t.Fatalf("unexpected: %v", e)
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Two partitions owned: a consumer each, with its own term's token.
	s.Own(0, 5, time.Minute)
	s.Own(2, 7, time.Minute)
	expect(consumerEvent{true, 0, 5}, consumerEvent{true, 2, 7})
	quiet()

	// Partition 0 handed over: its consumer stops; partition 2's runs on.
	s.Disown(0)
	expect(consumerEvent{false, 0, 5})
	quiet()

	// A claim that runs out (the sidecar no longer renews it) stops its
	// consumer by its validUntil.
	const validFor = 300 * time.Millisecond
	owned := time.Now()
	s.Own(1, 3, validFor)
	expect(consumerEvent{true, 1, 3})
	expect(consumerEvent{false, 1, 3})
	if took := time.Since(owned); took > validFor+answerSlack {
		t.Errorf("the consumer of a claim valid for %v stopped %v after it began", validFor, took)
	}

	// Partition 0 back in a new term: a new consumer with the new token.
	s.Own(0, 8, time.Minute)
	expect(consumerEvent{true, 0, 8})
	quiet()

	// The worker stops every consumer when it ends.
	cancel()
	expect(consumerEvent{false, 0, 8}, consumerEvent{false, 2, 7})
	ended = true
	if err := <-done; err != context.Canceled {
		t.Errorf("Run returned %v, want context.Canceled", err)
	}
}

// TestWorkerStartsNothingPastValidUntil: an answer that arrives after the
// claim's validUntil (a slow answer; here the fake sidecar's clock runs a
// second behind the worker's) starts no consumer: its term may already
// be another pod's.
func TestWorkerStartsNothingPastValidUntil(t *testing.T) {
	s := apitest.New(t, apitest.Config{Partitions: 2, Now: func() time.Time { return time.Now().Add(-time.Second) }})
	events := make(chan consumerEvent, 4)
	consume := func(ctx context.Context, partition int, token int64) {
		events <- consumerEvent{true, partition, token}
		<-ctx.Done()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.Run(ctx, s.URL, consume) }()
	defer func() {
		cancel()
		<-done
	}()

	s.Own(0, 4, 300*time.Millisecond) // valid until 700 ms ago, to the worker
	s.Own(1, 6, time.Minute)
	select {
	case e := <-events:
		if e != (consumerEvent{true, 1, 6}) {
			t.Fatalf("%v; want only partition 1's consumer", e)
		}
	case <-time.After(answerSlack):
		t.Fatal("partition 1's consumer never started")
	}
	select {
	case e := <-events:
		t.Errorf("%v, for a claim past its validUntil", e)
	case <-time.After(500 * time.Millisecond):
	}
}
