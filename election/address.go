package election

import (
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/holderaddress"
)

// observeHolderAddress records the annotation of a version of the Lease the
// cache takes in (from the watch, a write or a direct read). Only an
// annotation that names the version's own holder and token counts: one left
// over from an earlier term is not this term's. A version of a term without
// a valid annotation withdraws what an earlier version of that term said.
// It does not publish: the version's record reaches the tracker right after
// (see leasecache.Cache.OnKeep), and the view shows an address only for the
// holder and token it shows (addressLocked). The last two terms' addresses
// are kept, so that between the annotation and the record of a new term the
// previous term still shows its own.
func (t *tracker) observeHolderAddress(lease *coordinationv1.Lease, allowLoopback bool) {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	token := int64(ptr.Deref(lease.Spec.LeaseTransitions, 0))
	a, ok := holderaddress.Parse(lease, allowLoopback)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok || a.Holder != holder || a.FencingToken != token {
		for i := range t.addresses {
			if t.addresses[i].Holder == holder && t.addresses[i].FencingToken == token {
				t.addresses[i] = holderaddress.Value{}
			}
		}
		return
	}
	if a.Holder == t.addresses[0].Holder && a.FencingToken == t.addresses[0].FencingToken {
		t.addresses[0] = a
		return
	}
	t.addresses[1] = t.addresses[0]
	t.addresses[0] = a
}

// addressLocked returns the address published for the term of holder with
// token, or "" if that term published none: no holder, a holder that does
// not advertise, an annotation left by another term, or a view whose token
// is not the observed record's (an etcd restore brought back an older term).
func (t *tracker) addressLocked(holder string, token int64) string {
	if holder == "" || holder != t.observed.holder || token != t.observed.transitions {
		return ""
	}
	for _, a := range t.addresses {
		if a.Holder == holder && a.FencingToken == token {
			return a.Address
		}
	}
	return ""
}
