package election

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/leader-elector/leader-elector/leasecache"
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
			e.cache.Observe(released)
			client.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tc.winnerFirst {
					e.cache.Observe(leaseVersion("pod-b", "3", t0))
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
			if got := e.backoff.LostInARow(); got != tc.wantLost {
				t.Errorf("races lost = %d, want %d", got, tc.wantLost)
			}
			until := e.backoff.ThrottledUntil()
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
	l.r.once = append(l.r.once, leasecache.SentOnce(ctx))
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
