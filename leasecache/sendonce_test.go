package leasecache

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
)

const testIdentity = "pod-a"

// TestUpdateOnceAgainstHTTP: with a real REST client, an update sent once
// reaches the server once when refused with 429 and Retry-After, and its
// error carries the Retry-After; the same update sent normally is sent
// again after the Retry-After (which is why takeovers are sent once). The
// body is the Lease, in protobuf, as the typed client sends it.
func TestUpdateOnceAgainstHTTP(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	var puts atomic.Int32
	var bodyErr atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/apis/coordination.k8s.io/v1/namespaces/"+testNamespace+"/leases/"+testName {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		n := puts.Add(1)
		if err := checkLeaseBody(r); err != nil {
			bodyErr.Store(err.Error())
		}
		status := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure}
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			status.Code, status.Reason = http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests
			status.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		} else {
			status.Code, status.Reason = http.StatusConflict, metav1.StatusReasonConflict
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(int(status.Code))
		_ = json.NewEncoder(w).Encode(status)
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := New(testNamespace, testName, client, client, nil)
	lease := testLease(testIdentity, 4)
	lease.ResourceVersion = "7"

	_, err = c.Leases(testNamespace).Update(SendOnce(ctx), lease, metav1.UpdateOptions{})
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("update sent once = %v, want 429", err)
	}
	if s, ok := apierrors.SuggestsClientDelay(err); !ok || s != 1 {
		t.Errorf("Retry-After carried by the error = %d, %v; want 1", s, ok)
	}
	if n := puts.Load(); n != 1 {
		t.Errorf("update sent once reached the server %d times, want 1", n)
	}

	puts.Store(0)
	_, err = c.Leases(testNamespace).Update(ctx, lease, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("update with retries = %v, want the retry's 409", err)
	}
	if n := puts.Load(); n != 2 {
		t.Errorf("update with retries reached the server %d times, want 2", n)
	}
	if msg := bodyErr.Load(); msg != nil {
		t.Error(msg)
	}
}

// checkLeaseBody decodes a PUT's protobuf body and checks that it is the
// test Lease, based on resourceVersion 7.
func checkLeaseBody(r *http.Request) error {
	if ct := r.Header.Get("Content-Type"); ct != "application/vnd.kubernetes.protobuf" {
		return errors.New("content type " + ct + ", want protobuf")
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	obj, _, err := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Decode(data, nil, nil)
	if err != nil {
		return err
	}
	lease, ok := obj.(*coordinationv1.Lease)
	if !ok || lease.Name != testName || lease.ResourceVersion != "7" || *lease.Spec.HolderIdentity != testIdentity {
		return errors.New("body is not the test Lease at resourceVersion 7")
	}
	return nil
}
