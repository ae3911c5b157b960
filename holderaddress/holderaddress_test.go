package holderaddress

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const identity = "pod-a"

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func newLease(holder string, transitions int32, renew time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "my-app", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime:          &metav1.MicroTime{Time: renew},
			RenewTime:            &metav1.MicroTime{Time: renew},
			LeaseTransitions:     ptr.To(transitions),
		},
	}
}

// annotated returns lease with the annotation set to value.
func annotated(lease *coordinationv1.Lease, value string) *coordinationv1.Lease {
	lease.Annotations = map[string]string{Annotation: value}
	return lease
}

func TestCheck(t *testing.T) {
	for _, ok := range []string{"10.0.0.5:8080", "[fd00::5]:443", "my-app-0.my-app.ns.svc:65535"} {
		for _, allowLoopback := range []bool{false, true} {
			if err := Check(ok, allowLoopback); err != nil {
				t.Errorf("Check(%q, %v) = %v, want nil", ok, allowLoopback, err)
			}
		}
	}
	// Loopback: outside a pod only (issue 30, review note 9b).
	for _, loopback := range []string{"127.0.0.1:1", "127.1.2.3:80", "[::1]:80", "[::ffff:127.0.0.1]:80", "localhost:80", "app.localhost:80"} {
		if err := Check(loopback, true); err != nil {
			t.Errorf("Check(%q, true) = %v, want nil", loopback, err)
		}
		if err := Check(loopback, false); err == nil || !strings.Contains(err.Error(), "loopback") {
			t.Errorf("Check(%q, false) = %v, want a loopback error", loopback, err)
		}
	}
	// Link-local (the cloud metadata service): never.
	for _, linkLocal := range []string{"169.254.169.254:80", "[fe80::1]:80", "[::ffff:169.254.169.254]:80"} {
		for _, allowLoopback := range []bool{false, true} {
			if err := Check(linkLocal, allowLoopback); err == nil || !strings.Contains(err.Error(), "link-local") {
				t.Errorf("Check(%q, %v) = %v, want a link-local error", linkLocal, allowLoopback, err)
			}
		}
	}
	for _, bad := range []string{"", "10.0.0.5", "10.0.0.5:0", "10.0.0.5:65536", "10.0.0.5:+80", "10.0.0.5:080", "0.0.0.0:80", "[::]:80", "224.0.0.1:80", "[fe80::1%eth0]:80", "Bad_Name:80", ":80", "a b:80", "x\x1b[31m:80", strings.Repeat("a", 300) + ":80"} {
		if err := Check(bad, true); err == nil {
			t.Errorf("Check(%q) = nil, want an error", bad)
		}
	}
}

// TestParseHolderAddressRefusesLoopbackAndLinkLocal: a reader ignores an
// annotation anyone with write access to the Lease could have planted to
// send followers' forwarded requests to the metadata service or to
// themselves (issue 30, review note 9b).
func TestParseHolderAddressRefusesLoopbackAndLinkLocal(t *testing.T) {
	for _, tc := range []struct {
		address       string
		allowLoopback bool
		want          bool
	}{
		{"169.254.169.254:80", false, false},
		{"169.254.169.254:80", true, false},
		{"[fe80::1]:80", true, false},
		{"127.0.0.1:8080", false, false},
		{"localhost:8080", false, false},
		{"[::1]:8080", false, false},
		{"127.0.0.1:8080", true, true},
		{"10.0.0.6:8080", false, true},
	} {
		v := `{"holder":"pod-b","fencingToken":8,"address":"` + tc.address + `"}`
		if _, ok := Parse(annotated(newLease("pod-b", 8, t0), v), tc.allowLoopback); ok != tc.want {
			t.Errorf("Parse(%s, allowLoopback=%v) ok = %v, want %v", tc.address, tc.allowLoopback, ok, tc.want)
		}
	}
}

func TestAnnotateHolderAddress(t *testing.T) {
	const addr = "10.0.0.5:8080"
	want := `{"holder":"pod-a","fencingToken":7,"address":"10.0.0.5:8080"}`
	ours := newLease(identity, 7, t0)

	got := Annotate(ours, identity, addr)
	if v := got.Annotations[Annotation]; v != want {
		t.Errorf("our term's write: annotation %q, want %q", v, want)
	}
	if ours.Annotations != nil {
		t.Error("the caller's object was modified")
	}
	// The next term of this pod replaces it with its own token.
	next := got.DeepCopy()
	next.Spec.LeaseTransitions = ptr.To[int32](8)
	if v := Annotate(next, identity, addr).Annotations[Annotation]; !strings.Contains(v, `"fencingToken":8`) {
		t.Errorf("next term's write: annotation %q, want token 8", v)
	}
	// A release (no holder) and a term of this pod without an address
	// remove it; another holder's write is left alone.
	released := got.DeepCopy()
	released.Spec.HolderIdentity = ptr.To("")
	if _, ok := Annotate(released, identity, addr).Annotations[Annotation]; ok {
		t.Error("a release kept the annotation")
	}
	if _, ok := Annotate(got, identity, "").Annotations[Annotation]; ok {
		t.Error("a write of a pod that does not advertise kept the annotation")
	}
	theirs := annotated(newLease("pod-b", 8, t0), "x")
	if v := Annotate(theirs, identity, addr).Annotations[Annotation]; v != "x" {
		t.Errorf("another holder's annotation became %q", v)
	}
}

func TestParseHolderAddressIgnoresMalformed(t *testing.T) {
	good := `{"holder":"pod-b","fencingToken":8,"address":"10.0.0.6:8080"}`
	if a, ok := Parse(annotated(newLease("pod-b", 8, t0), good), false); !ok || a.Address != "10.0.0.6:8080" {
		t.Fatalf("parse(%s) = %+v, %v", good, a, ok)
	}
	for _, bad := range []string{
		"",
		"10.0.0.6:8080",
		"null",
		`{"holder":"pod-b","fencingToken":8}`,
		`{"fencingToken":8,"address":"10.0.0.6:8080"}`,
		`{"holder":"pod-b","fencingToken":"8","address":"10.0.0.6:8080"}`,
		`{"holder":"pod-b","fencingToken":8,"address":"10.0.0.6:8080","extra":1}`,
		good + good,
		`{"holder":"pod-b","fencingToken":8,"address":"0.0.0.0:8080"}`,
		`{"holder":"pod-b","fencingToken":8,"address":"evil\u001b[2J:80"}`,
		`{"holder":"pod-b","fencingToken":8,"address":"10.0.0.6:8080","holder":"` + strings.Repeat("x", maxBytes) + `"}`,
		`{"holder":"pod-b","fencingToken":99999999999999999999,"address":"10.0.0.6:8080"}`,
	} {
		if a, ok := Parse(annotated(newLease("pod-b", 8, t0), bad), false); ok {
			t.Errorf("parse(%q) = %+v, want it ignored", bad, a)
		}
	}
}

// TestTrackerHolderAddress: a follower shows the holder's address only for
// the term that published it, and never after that term has ended.
