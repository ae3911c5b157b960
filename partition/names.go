package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"
)

// Labels on every Lease of a partition group, so that one watch with a label
// selector finds them all.
const (
	// GroupLabel names the group (--lease-name).
	GroupLabel = "leader-elector.io/partition-group"
	// KindLabel says what the Lease is for: KindPartition or KindMember.
	KindLabel     = "leader-elector.io/kind"
	KindPartition = "partition"
	KindMember    = "member"
	// PartitionsLabel, on a membership Lease, is the member's N
	// (--partitions), so that pods with different N in one group (a rolling
	// update that changes N) agree on the effective N (see EffectiveN). It is
	// a label, not an annotation, because client-go writes a Lease's labels
	// with its creation and every renewal: no version of a membership Lease
	// lacks it, and it costs no write of its own.
	PartitionsLabel = "leader-elector.io/partitions"
	// AppHealthyLabel, on a membership Lease with health gating
	// (--app-health-url), is "true" or "false": the member's app's health
	// at its last renewal.
	AppHealthyLabel = "leader-elector.io/app-healthy"
)

// MaxPartitions is the most partitions a group may have.
const MaxPartitions = 1024

// MaxDrainTimeout is the longest drain timeout: a rebalance waits for it
// once per partition that moves.
const MaxDrainTimeout = 10 * time.Minute

// MaxGroupNameLength keeps the group name a valid label value (63
// characters), which also keeps every Lease name of the group short.
const MaxGroupNameLength = 63

// PartitionLease is the name of partition i's Lease.
func PartitionLease(group string, i int) string { return fmt.Sprintf("%s-p%d", group, i) }

// memberPrefix starts the name of every membership Lease of the group.
func memberPrefix(group string) string { return group + "-m-" }

// MemberLease is the name of the membership Lease of the pod with this
// identity. The identity is hashed: any string may be an identity, but not
// every string may be part of a Lease name.
func MemberLease(group, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return memberPrefix(group) + hex.EncodeToString(sum[:5])
}

func groupLabels(group string) map[string]string {
	return map[string]string{GroupLabel: group}
}

func leaseLabels(group, kind string) map[string]string {
	return map[string]string{GroupLabel: group, KindLabel: kind}
}

func memberLabels(group string, partitions int) map[string]string {
	l := leaseLabels(group, KindMember)
	l[PartitionsLabel] = strconv.Itoa(partitions)
	// Healthy unless health gating says otherwise (it writes the label
	// over this one): a member without gating must not keep a "false"
	// that an earlier pod of its name left on its Lease (client-go merges
	// labels, it never removes one).
	l[AppHealthyLabel] = "true"
	return l
}
