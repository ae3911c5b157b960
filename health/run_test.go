package health

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/leader-elector/leader-elector/internal/leasetest"
	"github.com/leader-elector/leader-elector/leadership"
)

// fakeElector records what health gating asks of the elector.
type fakeElector struct {
	mu       sync.Mutex
	leading  bool
	holder   string
	token    int64
	changed  chan struct{}
	degraded string
	stepDown []leadership.Reason
	tries    int
}

func newFakeElector(leading bool) *fakeElector {
	return &fakeElector{leading: leading, changed: make(chan struct{})}
}

func (f *fakeElector) Snapshot() leadership.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state()
}

// state is the elector's state as "a" sees it; f.mu held.
func (f *fakeElector) state() leadership.State {
	holder := f.holder
	if f.leading {
		holder = "a"
	}
	return leadership.State{Identity: "a", IsLeader: f.leading, Holder: holder, FencingToken: f.token}
}

// set changes the elector's state and tells its watchers.
func (f *fakeElector) set(leading bool, holder string, token int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leading, f.holder, f.token = leading, holder, token
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeElector) Watch() (leadership.State, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state(), f.changed
}

func (f *fakeElector) StepDown(_ context.Context, reason leadership.Reason) (leadership.State, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.leading {
		return leadership.State{}, leadership.ErrNotLeader
	}
	f.stepDown = append(f.stepDown, reason)
	f.leading = false
	close(f.changed)
	f.changed = make(chan struct{})
	return leadership.State{}, nil
}

func (f *fakeElector) SetDegraded(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.degraded = reason
}

func (f *fakeElector) TryNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tries++
}

func (f *fakeElector) get() (degraded string, stepDowns []leadership.Reason, tries int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.degraded, append([]leadership.Reason(nil), f.stepDown...), f.tries
}

type fakeProber struct {
	ok atomic.Bool
	// probes counts the probes answered.
	probes atomic.Int64
}

func (p *fakeProber) probe(context.Context) error {
	p.probes.Add(1)
	if p.ok.Load() {
		return nil
	}
	return errors.New("GET http://127.0.0.1:1/healthz answered 503 Service Unavailable")
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestRunDecides runs health gating against a fake elector and a fake
// client: the gate follows the probes, a healthy app makes the elector try
// at once, an unhealthy leader with no healthy candidate is degraded, and
// steps down (reason app-unhealthy) once another candidate publishes that
// it is healthy.
func TestRunDecides(t *testing.T) {
	p := &fakeProber{}
	el := newFakeElector(false)
	client, h, stop := runGated(t, p, el)
	ctx := context.Background()

	if h.Gate().Admits() || h.Ready() == nil {
		t.Fatal("the gate admits, or /readyz passes, before the app has answered")
	}
	p.ok.Store(true)
	poll(t, "the gate to admit", func() bool { return h.Gate().Admits() && h.Ready() == nil })
	poll(t, "TryNow", func() bool { _, _, tries := el.get(); return tries > 0 })

	// It leads; its app fails, and no one else is a candidate: degraded.
	el.mu.Lock()
	el.leading = true
	el.mu.Unlock()
	p.ok.Store(false)
	poll(t, "degraded", func() bool { d, _, _ := el.get(); return strings.Contains(d, "no healthy candidate to take over") })
	if h.Gate().Admits() || !strings.Contains(h.Ready().Error(), "the app is unhealthy: GET") {
		t.Errorf("unhealthy: gate admits %v, ready %v", h.Gate().Admits(), h.Ready())
	}
	if _, s, _ := el.get(); len(s) != 0 {
		t.Fatalf("stepped down with no healthy candidate: %v", s)
	}

	// Its own entry says unhealthy before the test writes the Lease: the
	// fake clientset does not refuse an update of an older version, so a
	// write of the test's could otherwise undo the candidate's.
	poll(t, "its own entry published unhealthy", func() bool {
		e := decode(mustGet(t, client))["a"]
		return !e.Healthy && e.Seq > 0
	})

	// Another candidate publishes that it is healthy: step down.
	leases := client.CoordinationV1().Leases("ns")
	// The fake clientset drops an event made between the informer's list
	// and its watch (a real API server replays it from the list's
	// resourceVersion), and the next resync is a lease duration away: so
	// the entry is published again, with a new seq, until it is seen.
	for seq := 1; ; seq++ {
		l, err := leases.Get(ctx, "app-candidates", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		m := decode(l)
		m["b"] = entry{Healthy: true, OK: true, Seq: int64(seq)}
		l.Annotations[CandidatesAnnotation] = mustJSON(t, m)
		if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if waitFor(100*time.Millisecond, func() bool { _, s, _ := el.get(); return len(s) > 0 }) || seq == 100 {
			break
		}
	}
	poll(t, "the step-down", func() bool { _, s, _ := el.get(); return len(s) == 1 && s[0] == leadership.ReasonAppUnhealthy })
	poll(t, "degraded cleared", func() bool { d, _, _ := el.get(); return d == "" })

	// Its own entry says unhealthy; on shutdown it is removed.
	if e := decode(mustGet(t, client)); e["a"].Healthy || e["a"].Seq == 0 {
		t.Errorf("own entry %+v, want published unhealthy", e["a"])
	}
	stop()
	if _, ok := decode(mustGet(t, client))["a"]; ok {
		t.Error("own entry still there after shutdown")
	}
}

// TestRunStepDownNoOneTook: an unhealthy leader steps down to the one
// candidate whose entry says it can take over; when the Lease is still
// free a lease duration later (that pod is gone: entries are not
// heartbeats), its entry is removed and the unhealthy candidate takes the
// Lease back (its gate admits), to lead degraded. When someone does take
// over, nothing is removed and the gate stays shut.
func TestRunStepDownNoOneTook(t *testing.T) {
	for _, tc := range []struct {
		name  string
		taken bool
	}{{"no one took", false}, {"taken", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const leaseDuration = 300 * time.Millisecond
			client := fake.NewClientset(candidatesLease(`{"b":{"healthy":true,"ok":true,"seq":1}}`))
			leasetest.RefuseWatchLists(client)
			h, err := New(Config{URL: "http://127.0.0.1:1/healthz", Period: 20 * time.Millisecond, Failures: 1, Successes: 1,
				Namespace: "ns", Lease: "app", Identity: "a", LeaseDuration: leaseDuration, Client: client})
			if err != nil {
				t.Fatal(err)
			}
			h.prober = &fakeProber{} // failing
			el := newFakeElector(true)
			el.token = 7
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = h.Run(ctx, el)
			}()
			defer func() { cancel(); <-done }()

			poll(t, "the step-down", func() bool { _, s, _ := el.get(); return len(s) == 1 })
			steppedDown := time.Now()
			if tc.taken {
				el.set(false, "b", 8)
			}
			_, _, triesBefore := el.get()
			if !tc.taken {
				poll(t, "b's entry removed", func() bool { _, ok := decode(mustGet(t, client))["b"]; return !ok })
				if took := time.Since(steppedDown); took < leaseDuration-50*time.Millisecond {
					t.Errorf("b's entry removed %v after the step-down, before a lease duration (%v)", took, leaseDuration)
				}
				poll(t, "the gate to admit the unhealthy candidate, and TryNow", func() bool {
					_, _, tries := el.get()
					return h.Gate().Admits() && tries > triesBefore
				})
				// It leads again: degraded, and the gate shuts (it admits
				// new terms only).
				el.set(true, "a", 9)
				poll(t, "degraded", func() bool { d, _, _ := el.get(); return strings.Contains(d, "no healthy candidate") })
				poll(t, "the gate shut", func() bool { return !h.Gate().Admits() })
				return
			}
			// The loop sees b's term at once (the elector's change wakes
			// it) and stops following the step-down: well before the lease
			// duration at which it would have pruned b.
			poll(t, "the step-down no longer followed", func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return h.handedTo == nil
			})
			if took := time.Since(steppedDown); took >= leaseDuration {
				t.Errorf("the take seen %v after the step-down, not before a lease duration (%v): it was not seen as a take", took, leaseDuration)
			}
			if _, ok := decode(mustGet(t, client))["b"]; !ok {
				t.Error("b's entry removed although b took over")
			}
			if h.Gate().Admits() {
				t.Error("the gate admits an unhealthy candidate although b took over")
			}
		})
	}
}

// waitFor reports whether cond holds within d.
func waitFor(d time.Duration, cond func() bool) bool {
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, d, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	return err == nil
}

func mustJSON(t *testing.T, m map[string]entry) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func mustGet(t *testing.T, client *fake.Clientset) *coordinationv1.Lease {
	t.Helper()
	l, err := client.CoordinationV1().Leases("ns").Get(context.Background(), "app-candidates", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRunNewcomerWritesItsEntryOnce: a candidate whose app answers its
// first probe writes its entry once, healthy: the first write waits for
// that answer instead of saying "unhealthy" a moment before.
func TestRunNewcomerWritesItsEntryOnce(t *testing.T) {
	p := &fakeProber{}
	p.ok.Store(true)
	client, _, stop := runGated(t, p, newFakeElector(false))
	defer stop()

	poll(t, "its entry published healthy", func() bool { return decode(mustGet(t, client))["a"].Healthy })
	// Ten more probes, each answered the same: nothing is due before the
	// refresh, minutes away, so a second write would be the first one's
	// "unhealthy" or a false prune (with the publisher's writes taking
	// well under ten probe periods on the fake clientset).
	seen := p.probes.Load()
	poll(t, "ten more probes", func() bool { return p.probes.Load() >= seen+10 })
	var writes []string
	for _, a := range client.Actions() {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetResource().Resource == "leases" {
			l := u.GetObject().(*coordinationv1.Lease)
			writes = append(writes, l.Annotations[CandidatesAnnotation])
		}
	}
	if len(writes) != 1 {
		t.Errorf("%d writes of the candidates Lease, want 1: %q", len(writes), writes)
	}
}

// TestRunLeaderRemovesItsEntryAfterTheTake: a leader that stops removes its
// entry from the candidates Lease once another candidate holds the Lease,
// not beside its successor's take; with no one taking over, it removes it
// after publishTimeout/2 all the same.
func TestRunLeaderRemovesItsEntryAfterTheTake(t *testing.T) {
	for _, taken := range []bool{true, false} {
		p := &fakeProber{}
		p.ok.Store(true)
		el := newFakeElector(true)
		client, _, stop := runGated(t, p, el)
		stopped := make(chan struct{})
		poll(t, "its entry published", func() bool { return decode(mustGet(t, client))["a"].Healthy })
		// It stops, having released the Lease: no holder yet.
		el.set(false, "", 1)
		began := time.Now()
		go func() { stop(); close(stopped) }()
		// A window for the defect to show, not a synchronisation: a
		// removal at the stop itself lands within milliseconds.
		time.Sleep(publishTimeout / 4)
		if _, ok := decode(mustGet(t, client))["a"]; !ok {
			t.Fatalf("taken %v: the entry left before anyone took the Lease", taken)
		}
		if taken {
			el.set(false, "b", 2)
		}
		<-stopped
		if _, ok := decode(mustGet(t, client))["a"]; ok {
			t.Errorf("taken %v: the entry is still there after the stop", taken)
		}
		if waited := time.Since(began); taken && waited >= publishTimeout/2 || !taken && waited < publishTimeout/2 {
			t.Errorf("taken %v: the entry left %v after the stop", taken, waited)
		}
	}
}

// gatedPeriod is runGated's probe period.
const gatedPeriod = 20 * time.Millisecond

// runGated runs health gating for candidate "a" (probes every gatedPeriod
// answered by p) against el and a fake clientset that holds an empty
// candidates Lease; stop ends Run and waits for it to return.
func runGated(t *testing.T, p *fakeProber, el *fakeElector) (client *fake.Clientset, h *Health, stop func()) {
	t.Helper()
	client = fake.NewClientset(candidatesLease(""))
	leasetest.RefuseWatchLists(client)
	h, err := New(Config{URL: "http://127.0.0.1:1/healthz", Period: gatedPeriod, Failures: 2, Successes: 1,
		Namespace: "ns", Lease: "app", Identity: "a", LeaseDuration: time.Minute, Client: client})
	if err != nil {
		t.Fatal(err)
	}
	h.prober = p
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = h.Run(ctx, el)
	}()
	return client, h, func() { cancel(); <-done }
}
