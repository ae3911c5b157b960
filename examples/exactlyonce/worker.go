// Package exactlyonce is a worker that processes a partitioned stream
// exactly once next to a leader-elector sidecar in partition mode: it reads
// each partition it owns from a source it does not control, applies every
// item to a sink fenced by the partition's token and offset, checkpoints
// with the sidecar, and hands a draining partition over after a final
// checkpoint. docs/partitions.md explains why this is exactly-once; the e2e
// suite (TestExactlyOnceWorker) runs it through joins, leaves, crashes,
// freezes and rebalances. It uses only the api package and the standard
// library.
package exactlyonce

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Config configures Run.
type Config struct {
	// Sidecar is the client of this pod's sidecar.
	Sidecar *api.Client
	// Source is the directory of the partitions' streams (SourcePath).
	Source string
	// Sink is where the results go.
	Sink Sink
	// CheckpointEvery is how many applied items make a checkpoint.
	CheckpointEvery int
	// Poll is how often the end of a stream is read again for new items.
	Poll time.Duration
	// Process turns an item into its result (one line); the identity if
	// nil.
	Process func(partition int, offset int64, item string) string
	// Log receives what the worker does.
	Log *slog.Logger
}

// CheckpointValue is the checkpoint the worker stores: the offset of the
// last item the sink has.
func CheckpointValue(offset int64) string { return "offset=" + strconv.FormatInt(offset, 10) }

// ParseCheckpoint reads a CheckpointValue; no checkpoint is offset 0.
func ParseCheckpoint(c *api.Checkpoint) (int64, error) {
	if c == nil {
		return 0, nil
	}
	v, ok := strings.CutPrefix(c.Value, "offset=")
	if !ok {
		return 0, fmt.Errorf("checkpoint %q is not offset=<n>", c.Value)
	}
	return strconv.ParseInt(v, 10, 64)
}

type key struct {
	partition int
	token     int64
}

type consumer struct {
	ctx    context.Context
	stop   context.CancelFunc
	expire *time.Timer   // stops the consumer at validUntil unless renewed
	drain  chan struct{} // closed when the partition is to be handed over
}

// Run follows the sidecar's GET /partitions and runs one consumer per owned
// partition and term until ctx ends. An error of a consumer that means the
// worker is wrong (ErrGap, a broken sink) ends Run with it.
func Run(ctx context.Context, c Config) error {
	if c.Process == nil {
		c.Process = func(_ int, _ int64, item string) string { return item }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[key]*consumer{}
	defer func() {
		for _, r := range running {
			r.stop()
		}
	}()
	var revision uint64
	for ctx.Err() == nil {
		// Wait far less than the renew deadline, so that every answer
		// brings a fresh validUntil well before the last one passes, even
		// when nothing else changes.
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := c.Sidecar.WaitPartitions(wctx, revision, 500*time.Millisecond)
		wcancel()
		if err != nil {
			if ctx.Err() == nil {
				c.Log.Info("sidecar unreachable; consumers stop at validUntil", "err", err)
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
			}
			continue
		}
		revision = s.Revision
		now := map[key]bool{}
		for _, o := range s.Owned {
			k := key{o.Partition, o.FencingToken}
			now[k] = true
			left := time.Until(o.ValidUntil.Time)
			r := running[k]
			if r == nil || r.ctx.Err() != nil {
				if left <= 0 {
					continue // a late answer: the claim ended before it came
				}
				pctx, stop := context.WithCancel(ctx)
				expire := time.AfterFunc(left, func() {
					if pctx.Err() == nil {
						c.Log.Info("the claim's validUntil passed without a fresh answer: stop", "partition", o.Partition, "token", o.FencingToken)
					}
					stop()
				})
				r = &consumer{ctx: pctx, stop: stop, expire: expire, drain: make(chan struct{})}
				running[k] = r
				wg.Go(func() {
					defer stop()
					if err := c.consume(pctx, o, r.drain, true); err != nil {
						cancel(err)
					}
				})
			} else {
				r.expire.Reset(left)
			}
			if o.Draining {
				select {
				case <-r.drain:
				default:
					close(r.drain)
				}
			}
		}
		for k, r := range running {
			if !now[k] {
				if r.ctx.Err() == nil {
					c.Log.Info("no longer owned: stop", "partition", k.partition, "token", k.token)
				}
				r.stop() // lost, released or handed over: stop at once
				r.expire.Stop()
				delete(running, k)
			}
		}
	}
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// RunPartition processes one partition under one fencing token, as a child
// of `leader-elector run --partitions` (docs/supervisor.md, "Partition
// mode"), which starts it with $LEADER_ELECTOR_PARTITION and
// $LEADER_ELECTOR_FENCING_TOKEN while its pod owns the partition, kills it
// before the claim ends, and sends SIGTERM to drain it. So, unlike Run, it
// follows no claim: it reads the partition's checkpoint once, consumes until
// ctx ends or drain is closed, and on drain stores a final checkpoint and
// returns without releasing: the supervisor releases the partition once
// this process has exited, so its successor never runs beside it. A
// partition this pod no longer owns under token returns nil at once.
func RunPartition(ctx context.Context, c Config, partition int, token int64, drain <-chan struct{}) error {
	if c.Process == nil {
		c.Process = func(_ int, _ int64, item string) string { return item }
	}
	s, err := c.Sidecar.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("partition %d: read the checkpoint: %w", partition, err)
	}
	for _, o := range s.Owned {
		if o.Partition == partition && o.FencingToken == token {
			return c.consume(ctx, o, drain, false)
		}
	}
	c.Log.Info("no longer owned under this token: nothing to do", "partition", partition, "token", token)
	return nil
}

// consume processes partition o.Partition under o.FencingToken until ctx
// ends, the sink refuses the token, or the partition drains. On drain it
// stores a final checkpoint and, if release, hands the partition over
// itself. Only errors that mean the worker is wrong are returned.
func (c Config) consume(ctx context.Context, o api.OwnedPartition, drain <-chan struct{}, release bool) error {
	p, token := o.Partition, o.FencingToken
	log := c.Log.With("partition", p, "token", token)
	from, err := ParseCheckpoint(o.Checkpoint)
	if err != nil {
		return err
	}
	// Announce the new term to the sink first: from now on the previous
	// owner's writes are refused, even if it has not noticed yet.
	st, err := c.Sink.Fence(ctx, p, token)
	if errors.Is(err, ErrStaleToken) {
		log.Info("the sink has seen a newer owner", "sinkToken", st.Token)
		return nil
	}
	if err != nil {
		// Tried again on the sidecar's next answer, if still owned.
		log.Info("the sink failed; stop", "err", err)
		return nil
	}
	log.Info("consuming", "checkpoint", from, "sinkOffset", st.Offset)
	src, err := openSource(c.Source, p, from, c.Poll)
	if err != nil {
		return err
	}
	defer src.Close()
	last := st.Offset // what the sink has: the checkpoint's truth
	sinceCheckpoint := 0
	var notBefore time.Time // after a 429, when the sidecar takes the next one
	checkpoint := func(force bool) bool {
		if !force && time.Now().Before(notBefore) {
			return true
		}
		// Under this consumer's own term: a consumer that outlived it
		// (its partition lost and taken back meanwhile) is refused, and
		// cannot move the current term's checkpoint back.
		_, err := c.Sidecar.CheckpointTerm(ctx, p, token, CheckpointValue(last))
		var e *api.Error
		switch {
		case err == nil:
			sinceCheckpoint = 0
		case errors.As(err, &e) && e.StatusCode == http.StatusConflict:
			log.Info("checkpoint refused: no longer the owner", "reason", e.Reason)
			return false
		case errors.As(err, &e) && e.StatusCode == http.StatusTooManyRequests:
			// Too soon after the last one: skip until Retry-After has
			// passed, and keep applying meanwhile.
			notBefore = time.Now().Add(max(e.RetryAfter, 100*time.Millisecond))
		default:
			// The sidecar did not answer: try again after the next
			// CheckpointEvery items, not after every one.
			log.Info("checkpoint failed", "err", err)
			sinceCheckpoint = 0
		}
		return true
	}
	items := make(chan sourceItem)
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	go func() {
		for {
			item, err := src.next(rctx, true)
			select {
			case items <- sourceItem{src.offset, item, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-drain:
			// Finish: the item in hand is applied; store where the sink is,
			// then hand the partition over (or leave that to the
			// supervisor, which releases once this process has exited).
			switch {
			case !checkpoint(true):
			case !release:
				log.Info("drained", "offset", last)
			default:
				if _, err := c.Sidecar.ReleasePartitionTerm(context.WithoutCancel(ctx), p, token); err != nil {
					log.Info("release failed", "err", err)
				} else {
					log.Info("drained and released", "offset", last)
				}
			}
			return nil
		case it := <-items:
			if it.err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("partition %d: read the source: %w", p, it.err)
			}
			if ctx.Err() != nil {
				return nil // the claim ended while the item was read
			}
			applied, err := c.Sink.Apply(ctx, p, token, it.offset, c.Process(p, it.offset, it.item))
			switch {
			case errors.Is(err, ErrStaleToken):
				log.Info("the sink refused the token: another pod owns the partition", "offset", it.offset)
				return nil
			case errors.Is(err, ErrGap):
				return fmt.Errorf("partition %d: %w", p, err)
			case err != nil:
				// The sink did not answer (or ctx ended): whether it
				// applied the item is unknown, and the next owner or the
				// next term resumes from the sink's offset either way.
				log.Info("the sink failed; stop", "offset", it.offset, "err", err)
				return nil
			}
			if !applied {
				continue // the sink has it already
			}
			last = it.offset
			if sinceCheckpoint++; sinceCheckpoint >= c.CheckpointEvery && !checkpoint(false) {
				return nil
			}
		}
	}
}

type sourceItem struct {
	offset int64
	item   string
	err    error
}
