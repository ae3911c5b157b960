// Package worker is the partition worker of docs/partitions.md, as code that
// is compiled and tested (test/e2e TestReadmeWorker): docs/partitions.md shows
// the part between the "README" markers, and a test checks that the two are
// the same.
package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// README: begin

// Run runs next to the sidecar; consume(ctx, partition, token) is your code
// and must stop when ctx ends. It passes token with every write, to the
// sidecar too (PUT /partitions/<i>/checkpoint?fencingToken=<token>, POST
// /partitions/<i>/release?fencingToken=<token>): a consumer that outlives
// its term is then refused (409). A consumer stops when its partition is no
// longer listed, and also when its claim's validUntil passes without a fresh
// answer from the sidecar (the sidecar is unreachable, paused or gone).
func Run(ctx context.Context, sidecar string, consume func(ctx context.Context, partition int, token int64)) error {
	type owned struct {
		Partition    int   `json:"partition"`
		FencingToken int64 `json:"fencingToken"`
	}
	type consumer struct {
		ctx    context.Context
		stop   context.CancelFunc
		expire *time.Timer // stops the consumer at validUntil unless renewed
	}
	running := map[owned]*consumer{}
	defer func() {
		for _, c := range running {
			c.stop()
		}
	}()
	var revision uint64
	for ctx.Err() == nil {
		// Wait less than the renew deadline, so that every answer brings
		// a fresh validUntil even when nothing else changes.
		url := fmt.Sprintf("%s/partitions?wait=3s&revision=%d", sidecar, revision)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			time.Sleep(time.Second) // consumers stop on their own at validUntil
			continue
		}
		var state struct {
			Owned []struct {
				owned
				ValidUntil time.Time `json:"validUntil"`
			} `json:"owned"`
			Revision uint64 `json:"revision"`
		}
		err = json.NewDecoder(resp.Body).Decode(&state)
		resp.Body.Close()
		if err != nil {
			return err
		}
		revision = state.Revision
		now := map[owned]bool{}
		for _, o := range state.Owned {
			now[o.owned] = true
			left := time.Until(o.ValidUntil)
			if c := running[o.owned]; c != nil && c.ctx.Err() == nil {
				c.expire.Reset(left)
				continue
			}
			if left <= 0 {
				continue // a late answer: the claim ended before it came
			}
			pctx, stop := context.WithCancel(ctx)
			running[o.owned] = &consumer{ctx: pctx, stop: stop, expire: time.AfterFunc(left, stop)}
			go consume(pctx, o.Partition, o.FencingToken)
		}
		for o, c := range running {
			if !now[o] {
				c.stop() // lost, released or handed over: stop at once
				delete(running, o)
			}
		}
	}
	return ctx.Err()
}

// README: end
