package routing

import (
	"errors"
	"strings"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2/ktesting"
)

// shippedSlice is the EndpointSlice as the chart and the kustomize
// component ship it: named like the Service, its labels, no endpoints, and
// what Helm adds.
func shippedSlice() *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: SliceName("app"), Namespace: ns, ResourceVersion: "1",
			Labels: map[string]string{
				discoveryv1.LabelServiceName:   "app",
				discoveryv1.LabelManagedBy:     ManagedBy,
				"app.kubernetes.io/managed-by": "Helm",
			},
			Annotations: map[string]string{"meta.helm.sh/release-name": "rel", "meta.helm.sh/release-namespace": ns},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
}

// TestSliceMissing: without the shipped slice the leader reports that it
// is missing and creates nothing (sliceCalls has no create: the fake
// clientset fails the test on one).
func TestSliceMissing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)))
	err := w.publish(ctx, leading(5))
	if !errors.Is(err, ErrSliceMissing) || !strings.Contains(err.Error(), "endpointslice ns/app") {
		t.Errorf("publish without the slice: %v, want ErrSliceMissing naming ns/app", err)
	}
	for _, a := range cs.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("created %s", a.GetResource().Resource)
		}
	}
	if err := w.withdraw(ctx); err != nil {
		t.Errorf("withdraw without the slice: %v, want nothing to do", err)
	}
}

// TestSliceKeepsWhatItDidNotWrite: the leader's write replaces the
// endpoints and ports and sets its labels and annotations, and keeps
// everything else on the shipped slice: Helm's ownership annotations and
// labels (without them `helm upgrade` refuses the release), and owners.
func TestSliceKeepsWhatItDidNotWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	shipped := shippedSlice()
	shipped.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "app", UID: "svc-uid"}}
	w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), shipped)
	if err := w.publish(ctx, leading(5)); err != nil {
		t.Fatal(err)
	}
	got := getSlice(t, cs)
	for k, v := range shipped.Labels {
		if got.Labels[k] != v {
			t.Errorf("label %s=%q, want %q kept", k, got.Labels[k], v)
		}
	}
	for k, v := range shipped.Annotations {
		if got.Annotations[k] != v {
			t.Errorf("annotation %s=%q, want %q kept", k, got.Annotations[k], v)
		}
	}
	if got.Annotations[FencingTokenAnnotation] != "5" || len(got.Endpoints) != 1 {
		t.Errorf("slice %+v, want this pod with token 5", got)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "svc-uid" {
		t.Errorf("owners %+v, want kept", got.OwnerReferences)
	}
}

// TestSliceAddressFamily: the address type of a slice is immutable, so a
// pod whose IP is of the other family says so instead of writing.
func TestSliceAddressFamily(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	w, cs := newSliceWriter(t, newLeadership(leading(5)), service(nil, intstr.FromInt32(8080)), shippedSlice())
	w.cfg.PodIP = "fd00::7"
	err := w.publish(ctx, leading(5))
	if err == nil || !strings.Contains(err.Error(), "ship the slice with addressType IPv6") {
		t.Errorf("publish of an IPv6 address into an IPv4 slice: %v", err)
	}
	if got := getSlice(t, cs); len(got.Endpoints) != 0 {
		t.Errorf("wrote %+v", got.Endpoints)
	}
}
