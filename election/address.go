package election

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
)

// HolderAddressAnnotation is the annotation on the Lease in which the
// holder publishes the address followers can forward requests to
// (--advertise-address). Its value is JSON naming the term it belongs to,
// {"holder":"pod-a","fencingToken":42,"address":"10.0.0.5:8080"}: it is
// written in the same write as the term's acquisition and every renewal, so
// a reader pairs it with the holder and token of the very version it reads,
// and never shows the address of one term next to the holder of another.
const HolderAddressAnnotation = "leader-elector.io/holder-address"

// maxHolderAddressBytes bounds the annotation's value a reader parses: a
// holder (a DNS-1123 subdomain, 253), a token and a host:port fit in far
// less. Anyone who can write the Lease can write the annotation; a larger
// value is not ours and is ignored unread.
const maxHolderAddressBytes = 1024

// holderAddress is the annotation's value.
type holderAddress struct {
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
	Address      string `json:"address"`
}

// canonicalPort is a port number in canonical decimal, 1..65535 checked
// apart: strconv.Atoi alone takes "+80", "-0" and "0080".
var canonicalPort = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)

// CheckAdvertiseAddress checks an address a leader may advertise: host:port,
// where the host is an IP address (not unspecified, not multicast, not
// link-local, no zone) or a DNS-1123 subdomain, and the port 1..65535.
// The options check the flags with it, and readers check every annotation
// with it, so that an address shown to an app is always one of this form.
//
// Anyone who may write the Lease can write the annotation, and followers
// forward requests, credentials included, to it. A link-local address
// (169.254.0.0/16, fe80::/10) is never a pod's address but is the cloud
// metadata service's, so it is refused always. A loopback address
// (127.0.0.0/8, ::1, the name localhost) would make a follower send the
// requests to itself; it is allowed only with allowLoopback, for a sidecar
// run outside a pod (tests, local runs), which has nothing else. A DNS name
// is not resolved here: what it resolves to is the forwarder's to check.
func CheckAdvertiseAddress(address string, allowLoopback bool) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return errors.New("want host:port")
	}
	if err := checkAdvertisePort(port); err != nil {
		return err
	}
	return checkAdvertiseHost(host, allowLoopback)
}

func checkAdvertisePort(port string) error {
	n, err := strconv.Atoi(port)
	if !canonicalPort.MatchString(port) || err != nil || n > 65535 {
		return fmt.Errorf("invalid port %q: want a number from 1 to 65535", port)
	}
	return nil
}

func checkAdvertiseHost(host string, allowLoopback bool) error {
	const loopback = "a loopback address would send every follower's requests to the follower itself (allowed only outside a pod)"
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		switch {
		case ip.Zone() != "":
			return fmt.Errorf("invalid host %q: an address with a zone reaches nothing from another pod", host)
		case ip.IsUnspecified():
			return fmt.Errorf("invalid host %q: the unspecified address reaches nothing", host)
		case ip.IsMulticast():
			return fmt.Errorf("invalid host %q: a multicast address is no pod's", host)
		case ip.IsLinkLocalUnicast():
			return fmt.Errorf("invalid host %q: a link-local address is no pod's (169.254.169.254 is the cloud metadata service)", host)
		case ip.IsLoopback() && !allowLoopback:
			return fmt.Errorf("invalid host %q: %s", host, loopback)
		}
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(host); len(msgs) > 0 {
		return fmt.Errorf("invalid host %q: want an IP address or a DNS-1123 name: %s", host, strings.Join(msgs, "; "))
	}
	if !allowLoopback && (host == "localhost" || strings.HasSuffix(host, ".localhost")) {
		return fmt.Errorf("invalid host %q: %s", host, loopback)
	}
	return nil
}

// annotateHolderAddress sets, on a Lease this process is about to write,
// the annotation of the term the write carries: this pod's address if the
// write names this pod (an acquisition or a renewal, token included) and it
// advertises one. A write of this pod's term without an address, and a
// release (no holder), remove the annotation instead, so that this pod
// never leaves behind an address of a term that has ended. A write that
// names another holder leaves the annotation as it is. It returns the
// object to send: a copy when anything changed, never the caller's object
// modified.
func annotateHolderAddress(lease *coordinationv1.Lease, identity, address string) *coordinationv1.Lease {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder != "" && holder != identity {
		return lease
	}
	if holder == identity && address != "" {
		value, err := json.Marshal(holderAddress{Holder: identity, FencingToken: int64(ptr.Deref(lease.Spec.LeaseTransitions, 0)), Address: address})
		if err != nil {
			// Three plain fields cannot fail to encode; if they did, no
			// address is safer than a wrong one.
			value = nil
		}
		if value != nil {
			if lease.Annotations[HolderAddressAnnotation] == string(value) {
				return lease
			}
			lease = lease.DeepCopy()
			if lease.Annotations == nil {
				lease.Annotations = map[string]string{}
			}
			lease.Annotations[HolderAddressAnnotation] = string(value)
			return lease
		}
	}
	if _, ok := lease.Annotations[HolderAddressAnnotation]; !ok {
		return lease
	}
	lease = lease.DeepCopy()
	delete(lease.Annotations, HolderAddressAnnotation)
	return lease
}

// parseHolderAddress reads the annotation of lease. ok is false if there is
// none or it is not one a sidecar writes (too long, not the JSON above,
// unknown fields, no holder, an address CheckAdvertiseAddress refuses with
// allowLoopback): such a value is ignored, never shown.
func parseHolderAddress(lease *coordinationv1.Lease, allowLoopback bool) (holderAddress, bool) {
	value, found := lease.Annotations[HolderAddressAnnotation]
	if !found || len(value) > maxHolderAddressBytes {
		return holderAddress{}, false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var a holderAddress
	if err := dec.Decode(&a); err != nil || dec.More() {
		return holderAddress{}, false
	}
	if a.Holder == "" || CheckAdvertiseAddress(a.Address, allowLoopback) != nil {
		return holderAddress{}, false
	}
	return a, true
}

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
	a, ok := parseHolderAddress(lease, allowLoopback)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok || a.Holder != holder || a.FencingToken != token {
		for i := range t.addresses {
			if t.addresses[i].Holder == holder && t.addresses[i].FencingToken == token {
				t.addresses[i] = holderAddress{}
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
