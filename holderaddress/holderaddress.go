// Package holderaddress is the leader's address on its Lease
// (--advertise-address): which addresses a leader may advertise, and the
// annotation that carries one together with the term it belongs to. The
// elector writes it (Annotate) and reads it (Parse); options check the
// flags with Check.
package holderaddress

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

// Annotation is the annotation on the Lease in which the
// holder publishes the address followers can forward requests to
// (--advertise-address). Its value is JSON naming the term it belongs to,
// {"holder":"pod-a","fencingToken":42,"address":"10.0.0.5:8080"}: it is
// written in the same write as the term's acquisition and every renewal, so
// a reader pairs it with the holder and token of the very version it reads,
// and never shows the address of one term next to the holder of another.
const Annotation = "leader-elector.io/holder-address"

// maxBytes bounds the annotation's value a reader parses: a
// holder (a DNS-1123 subdomain, 253), a token and a host:port fit in far
// less. Anyone who can write the Lease can write the annotation; a larger
// value is not ours and is ignored unread.
const maxBytes = 1024

// Value is the annotation's value.
type Value struct {
	Holder       string `json:"holder"`
	FencingToken int64  `json:"fencingToken"`
	Address      string `json:"address"`
}

// canonicalPort is a port number in canonical decimal, 1..65535 checked
// apart: strconv.Atoi alone takes "+80", "-0" and "0080".
var canonicalPort = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)

// Check checks an address a leader may advertise: host:port,
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
func Check(address string, allowLoopback bool) error {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return errors.New("want host:port")
	}
	if err := checkPort(port); err != nil {
		return err
	}
	return checkHost(host, allowLoopback)
}

func checkPort(port string) error {
	n, err := strconv.Atoi(port)
	if !canonicalPort.MatchString(port) || err != nil || n > 65535 {
		return fmt.Errorf("invalid port %q: want a number from 1 to 65535", port)
	}
	return nil
}

func checkHost(host string, allowLoopback bool) error {
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

// Annotate sets, on a Lease this process is about to write,
// the annotation of the term the write carries: this pod's address if the
// write names this pod (an acquisition or a renewal, token included) and it
// advertises one. A write of this pod's term without an address, and a
// release (no holder), remove the annotation instead, so that this pod
// never leaves behind an address of a term that has ended. A write that
// names another holder leaves the annotation as it is. It returns the
// object to send: a copy when anything changed, never the caller's object
// modified.
func Annotate(lease *coordinationv1.Lease, identity, address string) *coordinationv1.Lease {
	holder := ptr.Deref(lease.Spec.HolderIdentity, "")
	if holder != "" && holder != identity {
		return lease
	}
	if holder == identity && address != "" {
		value, err := json.Marshal(Value{Holder: identity, FencingToken: int64(ptr.Deref(lease.Spec.LeaseTransitions, 0)), Address: address})
		if err != nil {
			// Three plain fields cannot fail to encode; if they did, no
			// address is safer than a wrong one.
			value = nil
		}
		if value != nil {
			if lease.Annotations[Annotation] == string(value) {
				return lease
			}
			lease = lease.DeepCopy()
			if lease.Annotations == nil {
				lease.Annotations = map[string]string{}
			}
			lease.Annotations[Annotation] = string(value)
			return lease
		}
	}
	if _, ok := lease.Annotations[Annotation]; !ok {
		return lease
	}
	lease = lease.DeepCopy()
	delete(lease.Annotations, Annotation)
	return lease
}

// Parse reads the annotation of lease. ok is false if there is
// none or it is not one a sidecar writes (too long, not the JSON above,
// unknown fields, no holder, an address Check refuses with
// allowLoopback): such a value is ignored, never shown.
func Parse(lease *coordinationv1.Lease, allowLoopback bool) (Value, bool) {
	value, found := lease.Annotations[Annotation]
	if !found || len(value) > maxBytes {
		return Value{}, false
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(value)))
	dec.DisallowUnknownFields()
	var a Value
	if err := dec.Decode(&a); err != nil || dec.More() {
		return Value{}, false
	}
	if a.Holder == "" || Check(a.Address, allowLoopback) != nil {
		return Value{}, false
	}
	return a, true
}
