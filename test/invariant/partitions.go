package invariant

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Partitions checks a partition group (leader-elector --partitions) from
// the answers members give to GET /partitions. A member that owns a
// partition is the leader of that partition's Lease, so each partition gets
// a Checker of its own: no two members' claims on one partition overlap, no
// claim is reported past its validUntil, and the partition's fencing token
// only grows.
type Partitions struct {
	mu       sync.Mutex
	checkers map[int]*Checker
}

// NewPartitions returns an empty partition checker.
func NewPartitions() *Partitions {
	return &Partitions{checkers: map[int]*Checker{}}
}

// Record checks the partitions member who reported owning (the "owned" of
// GET /partitions) in answer to a request sent at sent.
func (p *Partitions) Record(who string, sent time.Time, owned []api.OwnedPartition) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range owned {
		c := p.checkers[o.Partition]
		if c == nil {
			c = New(true)
			p.checkers[o.Partition] = c
		}
		c.Record(Answer{Who: who, Sent: sent, IsLeader: true, FencingToken: o.FencingToken, LeaderSince: o.Since.Time, ValidUntil: o.ValidUntil.Time})
	}
}

// Check compares all claims recorded so far, partition by partition, and
// that every one of the n partitions was seen owned; call it once, at the
// end.
func (p *Partitions) Check(n int) Report {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := make([]int, 0, len(p.checkers))
	for i := range p.checkers {
		parts = append(parts, i)
	}
	sort.Ints(parts)
	var total Report
	for _, i := range parts {
		r := p.checkers[i].Check()
		total.Observations += r.Observations
		total.Claims += r.Claims
		for _, v := range r.Violations {
			if len(total.Violations) < keptViolations {
				total.Violations = append(total.Violations, fmt.Sprintf("partition %d: %s", i, v))
			} else {
				total.More++
			}
		}
		total.More += r.More
	}
	if len(parts) != n {
		total.Violations = append(total.Violations, fmt.Sprintf("owners of %d partitions seen, want all %d", len(parts), n))
	}
	return total
}
