package election

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leasecache"
	"github.com/leader-elector/leader-elector/leasetimings"
)

// slowAPIServer serves one Lease like kube-apiserver with a Role of get and
// update only: list and watch are forbidden (so every read goes to the
// server), and a write is saved before its answer, which takes writeLatency.
type slowAPIServer struct {
	mu           sync.Mutex
	lease        *coordinationv1.Lease
	rv           int
	writeLatency time.Duration
	writes       []string
}

func (s *slowAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const path = "/apis/coordination.k8s.io/v1/namespaces/default/leases/my-app"
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == path:
		s.mu.Lock()
		body, _ := json.Marshal(s.lease)
		s.mu.Unlock()
		_, _ = w.Write(body)
	case r.Method == http.MethodPut && r.URL.Path == path:
		var l coordinationv1.Lease
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		if l.ResourceVersion != s.lease.ResourceVersion {
			s.mu.Unlock()
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Conflict","code":409}`))
			return
		}
		s.rv++
		l.ResourceVersion = strconv.Itoa(s.rv)
		l.TypeMeta = s.lease.TypeMeta
		s.lease = &l
		s.writes = append(s.writes, ptr.Deref(l.Spec.HolderIdentity, "")+"/"+strconv.Itoa(int(ptr.Deref(l.Spec.LeaseTransitions, -1))))
		body, _ := json.Marshal(s.lease)
		s.mu.Unlock()
		select { // saved; the answer takes a while (etcd, network)
		case <-time.After(s.writeLatency):
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(body)
	default:
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403}`))
	}
}

// TestElectorTakesReleasedLeaseAtOnce: a candidate that sees a free Lease
// takes it with the next token, at once, even when the round restart that
// the free Lease triggers races with the acquisition already on its way.
func TestElectorTakesReleasedLeaseAtOnce(t *testing.T) {
	t.Parallel()
	const leaseDuration, retryPeriod = 4 * time.Second, 500 * time.Millisecond
	if leasecache.SyncWait+retryPeriod+schedulingSlack >= leasecache.SyncWait+leaseDuration {
		t.Fatal("the bound does not tell a lost acquisition (a lease duration late) from a prompt one")
	}
	_, ctx := ktesting.NewTestContext(t)
	api := &slowAPIServer{rv: 1, writeLatency: 5 * time.Millisecond, lease: &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "my-app", ResourceVersion: "1"},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: ptr.To(""), LeaseDurationSeconds: ptr.To[int32](1), LeaseTransitions: ptr.To[int32](3),
			RenewTime: &metav1.MicroTime{Time: time.Now()}, AcquireTime: &metav1.MicroTime{Time: time.Now()},
		},
	}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Config{LeaseSpec: LeaseSpec{Namespace: "default", Name: "my-app", Identity: "pod-b",
		Timings: leasetimings.Timings{LeaseDuration: leaseDuration, RenewDeadline: 3 * time.Second, RetryPeriod: retryPeriod}}, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	runElector(t, ctx, e)
	waitFor(t, ctx, "leadership", func() bool { return e.Snapshot().IsLeader })
	api.mu.Lock()
	t.Logf("writes: %v", api.writes)
	api.mu.Unlock()
	if s := e.Snapshot(); s.FencingToken != 4 {
		t.Errorf("fencing token = %d, want 4: the first acquisition was lost", s.FencingToken)
	}
	// The watch is forbidden, so the first read waits leasecache.SyncWait for it; the
	// acquisition then takes one write, or one more at the next retry. A
	// lost acquisition costs a lease duration, beyond the bound.
	if d, bound := time.Since(start), leasecache.SyncWait+retryPeriod+schedulingSlack; d > bound {
		t.Errorf("took %v to take a released Lease, want at most %v (leasecache.SyncWait %v + retry period %v + slack %v)", d, bound, leasecache.SyncWait, retryPeriod, schedulingSlack)
	}
}
