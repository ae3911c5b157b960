package election

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// tooManyRequests is priority and fairness's answer to a write it will not
// queue any longer, with the Retry-After it asks for.
func tooManyRequests(retryAfterSeconds int) error {
	return apierrors.NewTooManyRequests("the API server is handling too many requests", retryAfterSeconds)
}

// unavailable is a 503 with a Retry-After, as a starting or overloaded API
// server answers.
func unavailable(retryAfterSeconds int32) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusServiceUnavailable,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Details: &metav1.StatusDetails{RetryAfterSeconds: retryAfterSeconds},
	}}
}

// TestRaceBackoffThrottled: after a refusal with a Retry-After, no
// takeover before the Retry-After (at most half a retry period) plus the
// candidate's drawn delay; a 429 draws from the largest window until a win
// or a long quiet time.
func TestRaceBackoffThrottled(t *testing.T) {
	clk := newTestClock()
	b := newRaceBackoff(clk, 2*time.Second, 15*time.Second)
	b.random = half
	if got := b.throttledUntil(); !got.IsZero() {
		t.Fatalf("throttled until %v before any refusal, want never", got)
	}
	b.throttled(time.Second)
	if got, want := b.throttledUntil(), t0.Add(time.Second); !got.Equal(want) {
		t.Errorf("no race lost: throttled until %v, want %v (the Retry-After alone)", got, want)
	}
	b.lost()
	b.throttled(time.Second)
	if got, want := b.throttledUntil(), t0.Add(time.Second+12500*time.Microsecond); !got.Equal(want) {
		t.Errorf("one race lost: throttled until %v, want %v (Retry-After plus the drawn delay)", got, want)
	}
	b.throttled(time.Hour)
	if got, want := b.throttledUntil(), t0.Add(time.Second+12500*time.Microsecond); !got.Equal(want) {
		t.Errorf("Retry-After of an hour: throttled until %v, want %v (capped at half a retry period)", got, want)
	}
	// A 429: the largest window at once (500 ms drawn from 1 s), and it
	// stays so for the races after, until a win.
	b.lostOverloaded()
	if w := b.wait(); w != 500*time.Millisecond {
		t.Errorf("after a 429: wait %v, want 500ms (half of the largest window)", w)
	}
	b.lost()
	if w := b.wait(); w != 500*time.Millisecond {
		t.Errorf("a conflict after a 429: wait %v, want 500ms (still the largest window)", w)
	}
	b.won()
	b.lost()
	if w := b.wait(); w != 12500*time.Microsecond {
		t.Errorf("a conflict after a win: wait %v, want 12.5ms (the first window again)", w)
	}
	clk.Step(20 * 15 * time.Second)
	b.lostOverloaded()
	clk.Step(20 * 15 * time.Second)
	b.lost()
	if w := b.wait(); w != 12500*time.Microsecond {
		t.Errorf("a conflict long after a 429: wait %v, want 12.5ms (forgotten)", w)
	}
	var none *raceBackoff
	none.lostOverloaded()
	none.throttled(time.Second)
	if got := none.throttledUntil(); !got.IsZero() {
		t.Errorf("no back-off: throttled until %v, want never", got)
	}
}

// TestElectorRefusedTakeover: a takeover write refused with a Retry-After
// is not tried again before it has passed, plus the drawn delay (client-go
// is shown the Lease as held), and a round is started then; a 429 is a race
// lost, counted even when the winner's version counted one, that draws the
// next delay from the largest window; a 5xx is not a race lost.
func TestElectorRefusedTakeover(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		// winnerFirst: the watch shows another holder while the write is
		// on its way.
		winnerFirst bool
		wantLost    int
		// wantUntil is how long after the refusal the next takeover may
		// be tried (0: no wait of the server's).
		wantUntil time.Duration
	}{
		// The delay is drawn from the largest window (1 s): 500 ms.
		{name: "429, Lease still free", err: tooManyRequests(1), wantLost: 1, wantUntil: 1500 * time.Millisecond},
		{name: "429 after the winner was seen", err: tooManyRequests(1), winnerFirst: true, wantLost: 2, wantUntil: 1500 * time.Millisecond},
		{name: "429 asking for more than half a retry period", err: tooManyRequests(30), wantLost: 1, wantUntil: 1500 * time.Millisecond},
		{name: "503 with Retry-After", err: unavailable(1), wantUntil: time.Second},
		{name: "429 without Retry-After", err: tooManyRequests(0)},
		{name: "conflict", err: apierrors.NewConflict(leasesResource, testName, errors.New("changed"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e, clk, client := newBackoffElector(t, CampaignAuto)
			rounds := countRounds(e)
			released := leaseVersion("", "2", t0)
			e.cache.offer(released)
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.winnerFirst {
					e.cache.offer(leaseVersion("pod-b", "3", t0))
				}
				return true, nil, tc.err
			})
			shown := func() string { return shownHolder(t, ctx, e) }
			if h := shown(); h != "" {
				t.Fatalf("released Lease shown held by %q", h)
			}
			if err := e.lock.Update(ctx, ownRecord(5, clk.Now())); !errors.Is(err, tc.err) && err.Error() != tc.err.Error() {
				t.Fatalf("Update = %v, want %v", err, tc.err)
			}
			if got := e.backoff.lostInARow(); got != tc.wantLost {
				t.Errorf("races lost = %d, want %d", got, tc.wantLost)
			}
			until := e.backoff.throttledUntil()
			if tc.wantUntil == 0 {
				if !until.IsZero() {
					t.Errorf("throttled until %v, want no wait", until)
				}
				return
			}
			if want := t0.Add(tc.wantUntil); !until.Equal(want) {
				t.Errorf("throttled until %v, want %v", until, want)
			}
			if tc.winnerFirst {
				// Held by the winner: the next attempt is at its expiry.
				clk.step(tc.wantUntil + time.Millisecond)
				if n := rounds.Load(); n != 0 {
					t.Errorf("%d rounds started on a Lease held by the winner", n)
				}
				return
			}
			clk.step(tc.wantUntil - time.Nanosecond)
			if h := shown(); h != backingOffHolder {
				t.Errorf("before the Retry-After has passed client-go is shown holder %q, want %q", h, backingOffHolder)
			}
			clk.step(time.Millisecond)
			if n := rounds.Load(); n != 0 {
				t.Fatalf("%d rounds started before the Retry-After had passed", n)
			}
			clk.step(time.Nanosecond)
			if n := rounds.Load(); n != 1 {
				t.Errorf("%d rounds started once the Retry-After had passed, want 1", n)
			}
			if h := shown(); h != "" {
				t.Errorf("once the Retry-After has passed client-go is shown holder %q, want none", h)
			}
		})
	}
}

// sendOnceRecorder records, for each update, whether it was sent once.
type sendOnceRecorder struct {
	coordinationv1client.LeasesGetter
	mu   sync.Mutex
	once []bool
}

func (r *sendOnceRecorder) Leases(namespace string) coordinationv1client.LeaseInterface {
	return recordingLeases{LeaseInterface: r.LeasesGetter.Leases(namespace), r: r}
}

type recordingLeases struct {
	coordinationv1client.LeaseInterface
	r *sendOnceRecorder
}

func (l recordingLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	l.r.mu.Lock()
	l.r.once = append(l.r.once, sentOnce(ctx))
	l.r.mu.Unlock()
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// TestLockSendsTakeoverOnce: a write that starts a new term is sent once; a
// renewal of this process's own term keeps the REST client's retries (its
// Lease is not contended, and a retry after Retry-After is sooner than the
// next renewal).
func TestLockSendsTakeoverOnce(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", 3, t0))
	rec := &sendOnceRecorder{LeasesGetter: l.client.CoordinationV1()}
	l.inner.Client = rec
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(4, l.clock.Now())); err != nil {
		t.Fatalf("takeover: %v", err)
	}
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(4, l.clock.Now())); err != nil {
		t.Fatalf("renewal: %v", err)
	}
	if len(rec.once) != 2 || !rec.once[0] || rec.once[1] {
		t.Errorf("sent once, per update (takeover, renewal) = %v, want [true false]", rec.once)
	}
}

// TestUpdateOnceAgainstHTTP: with a real REST client, an update sent once
// reaches the server once when refused with 429 and Retry-After, and its
// error carries the Retry-After; the same update sent normally is sent
// again after the Retry-After (which is why takeovers are sent once). The
// body is the Lease, in protobuf, as the typed client sends it.
func TestUpdateOnceAgainstHTTP(t *testing.T) {
	t.Parallel()
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
	c := newLeaseCache(testNamespace, testName, client, client, nil)
	lease := leaseVersion(testIdentity, "7", t0)

	_, err = c.Leases(testNamespace).Update(sendOnce(ctx), lease, metav1.UpdateOptions{})
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
