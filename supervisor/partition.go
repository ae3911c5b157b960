package supervisor

import (
	"context"
	"strconv"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// Partition mode (`leader-elector run --partitions`) runs one supervisor
// process per owned partition and term (partitions.go starts them). Each is
// the leader-mode supervisor with one change of source: it reads GET
// /partitions and takes "this pod owns partition P in term T" for "this pod
// leads", so every rule of decide.go, the watchdog and the process-tree
// handling hold per partition as they do for the leadership. What differs
// is in decide.go under rules.partition: a term-bound supervisor exits
// once its term is over, a drain stops its child (whose exit acknowledges
// the drain), and every end of the child releases the partition in its
// term.

// Environment a partition's child is given, besides the leader mode's.
const (
	EnvPartition  = "LEADER_ELECTOR_PARTITION"
	EnvPartitions = "LEADER_ELECTOR_PARTITIONS"
)

// PartitionTerm names the one term of one partition a supervisor serves.
type PartitionTerm struct {
	Partition int
	Token     int64
}

func (pt PartitionTerm) String() string {
	return strconv.Itoa(pt.Partition) + "@" + strconv.FormatInt(pt.Token, 10)
}

// partitionClaim fills o from a GET /partitions answer: this pod "leads"
// while it owns pt.Partition in the term pt.Token.
func partitionClaim(p api.Partitions, pt PartitionTerm, o *Observation) {
	o.Leader = api.Leader{
		Lease:                p.Lease,
		Identity:             p.Identity,
		LeaseDurationSeconds: p.LeaseDurationSeconds,
		Revision:             p.Revision,
	}
	o.Partitions = p.EffectivePartitions
	for _, op := range p.Owned {
		if op.Partition != pt.Partition || op.FencingToken != pt.Token {
			continue
		}
		l := &o.Leader
		l.IsLeader, l.Holder, l.FencingToken = true, p.Identity, op.FencingToken
		l.LeaderSince, l.ValidUntil, l.RenewTime, l.ValidForMs = op.Since, op.ValidUntil, op.RenewTime, op.ValidForMs
		o.Draining, o.DrainDeadline = op.Draining, op.DrainDeadline.Time
	}
}

// ask reads the claim the supervisor serves into o: GET /leader, or GET
// /partitions in partition mode.
func (s *supervisor) ask(ctx context.Context, o *Observation) error {
	if s.cfg.Partition == nil {
		l, err := s.cfg.API.Leader(ctx)
		o.Leader = l
		return err
	}
	p, err := s.cfg.API.Partitions(ctx)
	if err == nil {
		partitionClaim(p, *s.cfg.Partition, o)
	}
	return err
}

// askWait is ask as a long-poll from revision rev.
func (s *supervisor) askWait(ctx context.Context, rev uint64, o *Observation) error {
	if s.cfg.Partition == nil {
		l, err := s.cfg.LongPoll.WaitLeader(ctx, rev, longPollWait)
		o.Leader = l
		return err
	}
	p, err := s.cfg.LongPoll.WaitPartitions(ctx, rev, longPollWait)
	if err == nil {
		partitionClaim(p, *s.cfg.Partition, o)
	}
	return err
}

// releasePartition hands the partition back in the supervisor's term, once
// its child is gone: the acknowledgement of a drain, or the end of the
// work on it. In another term, or when no longer owned, the sidecar
// refuses it (409) and nothing changes.
func (s *supervisor) releasePartition(ctx context.Context) {
	pt := *s.cfg.Partition
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := s.cfg.API.ReleasePartitionTerm(ctx, pt.Partition, pt.Token); err != nil {
		s.log.Info("The partition was not released: its term is over, or the sidecar did not answer (if the term goes on, the next supervisor serves it)", "err", err.Error())
		return
	}
	s.log.Info("Released the partition")
}
