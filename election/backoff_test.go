package election

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/internal/racebackoff"
	"github.com/leader-elector/leader-elector/leadership"
)

// half is the back-off's random draw in these tests: the middle of the
// window.
func half() float64 { return 0.5 }

// leaseVersion is the test Lease naming holder at resourceVersion rv,
// renewed at renew.
func leaseVersion(holder, rv string, renew time.Time) *coordinationv1.Lease {
	l := newLease(holder, 4, renew)
	l.ResourceVersion = rv
	if holder == "" {
		l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	}
	return l
}

// settlingClock is a fake clock whose AfterFunc runs each function on a
// goroutine of its own (as Config.Clock requires) and whose settle waits
// for every function that a Step has fired to return: a test can then check
// that a timer has not fired yet.
type settlingClock struct {
	*clocktesting.FakeClock
	running *sync.WaitGroup
}

func (c settlingClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.FakeClock.AfterFunc(d, func() {
		c.running.Add(1)
		go func() {
			defer c.running.Done()
			f()
		}()
	})
}

// step moves the clock on and waits for what it fired.
func (c settlingClock) step(d time.Duration) {
	c.Step(d)
	c.running.Wait()
}

// newBackoffElector returns an elector on a fake clock whose cache has
// synced on no Lease, with the back-off's draw at the middle of its window.
func newBackoffElector(t *testing.T, campaign Campaign, objs ...runtime.Object) (*Elector, settlingClock, *fake.Clientset) {
	t.Helper()
	return newBackoffElectorWith(t, func(cfg *Config) { cfg.Campaign = campaign }, objs...)
}

// newBackoffElectorWith is newBackoffElector with the Config changed by
// configure.
func newBackoffElectorWith(t *testing.T, configure func(*Config), objs ...runtime.Object) (*Elector, settlingClock, *fake.Clientset) {
	t.Helper()
	client := newFakeClient(t, []string{"get", "update"}, objs...)
	clk := settlingClock{FakeClock: clocktesting.NewFakeClock(t0), running: &sync.WaitGroup{}}
	cfg := testConfig(client)
	cfg.Clock = clk
	configure(&cfg)
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(e.tracker.stop)
	e.backoff.Random = half
	e.cache.Synced()
	return e, clk, client
}

// countRounds marks e as running (a candidate) and counts the rounds its
// attempt timer starts (each cancels the round under way).
func countRounds(e *Elector) *atomic.Int32 {
	var rounds atomic.Int32
	e.tracker.setClaiming(true, "")
	e.mu.Lock()
	defer e.mu.Unlock()
	e.running = true
	e.cancelRun = func() { rounds.Add(1) }
	return &rounds
}

// shownHolder is the holder client-go is shown when it reads the Lease.
func shownHolder(t *testing.T, ctx context.Context, e *Elector) string {
	t.Helper()
	rec, _, err := e.lock.Get(ctx)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	return rec.HolderIdentity
}

// TestElectorCountsLostRaces: a Lease this candidate was about to take
// (released, or its holder's lease ran out), then seen held by another, is
// one race lost; nothing else is.
func TestElectorCountsLostRaces(t *testing.T) {
	for _, tc := range []struct {
		name     string
		campaign Campaign
		steps    func(e *Elector, clk settlingClock)
		want     int
		// notRunning: the elector is not running (a group's elector
		// between runs follows its Lease but races for nothing).
		notRunning bool
	}{
		{
			name: "released, then taken by another",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("pod-b", "2", t0))
				e.cache.Observe(leaseVersion("", "3", t0))
				e.cache.Observe(leaseVersion("pod-c", "4", t0))
			},
			want: 1,
		},
		{
			name: "two releases lost in a row",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("", "3", t0))
				e.cache.Observe(leaseVersion("pod-c", "4", t0))
				// The back-off (12.5 ms) has ended when the next winner
				// appears.
				e.cache.Observe(leaseVersion("", "5", clk.Now()))
				clk.step(12500 * time.Microsecond)
				e.cache.Observe(leaseVersion("pod-d", "6", clk.Now()))
			},
			want: 2,
		},
		{
			// The back-off kept it out of the second race: nothing lost.
			name: "taken by another while still backing off",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("", "3", t0))
				e.cache.Observe(leaseVersion("pod-c", "4", t0))
				e.cache.Observe(leaseVersion("", "5", clk.Now()))
				clk.step(12500*time.Microsecond - time.Nanosecond)
				e.cache.Observe(leaseVersion("pod-d", "6", clk.Now()))
			},
			want: 1,
		},
		{
			name: "expired, then taken by another",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("pod-b", "2", t0))
				clk.Step(15 * time.Second)
				e.cache.Observe(leaseVersion("pod-c", "3", clk.Now()))
			},
			want: 1,
		},
		{
			name: "renewed by its live holder",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("pod-b", "2", t0))
				clk.Step(2 * time.Second)
				e.cache.Observe(leaseVersion("pod-b", "3", clk.Now()))
			},
		},
		{
			name: "handed from one holder to another while held",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("pod-b", "2", t0))
				e.cache.Observe(leaseVersion("pod-c", "3", t0))
			},
		},
		{
			name: "released, then deleted",
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.ObserveDeleted()
			},
		},
		{
			name: "sitting out after its own release",
			steps: func(e *Elector, clk settlingClock) {
				e.tracker.setClaiming(false, leadership.ReasonReleased)
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.Observe(leaseVersion("pod-c", "3", t0))
			},
		},
		{
			name:       "not running",
			notRunning: true,
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.Observe(leaseVersion("pod-c", "3", t0))
			},
		},
		{
			name:     "manual campaign that nobody asked to campaign",
			campaign: CampaignManual,
			steps: func(e *Elector, clk settlingClock) {
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.Observe(leaseVersion("pod-c", "3", t0))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, clk, _ := newBackoffElector(t, tc.campaign)
			if !tc.notRunning {
				countRounds(e)
			}
			tc.steps(e, clk)
			if got := e.backoff.LostInARow(); got != tc.want {
				t.Errorf("races lost = %d, want %d", got, tc.want)
			}
		})
	}
}

// expectHeldFor checks that client-go is shown the Lease as held while
// this candidate waits (backingOffHolder) for wait from now, to the
// nanosecond, and free once the wait has ended; it steps clk to that end.
func expectHeldFor(t *testing.T, ctx context.Context, e *Elector, clk settlingClock, wait time.Duration) {
	t.Helper()
	if wait > 0 {
		if h := shownHolder(t, ctx, e); h != backingOffHolder {
			t.Errorf("as the wait begins client-go is shown holder %q, want %q", h, backingOffHolder)
		}
		clk.step(wait - time.Nanosecond)
		if h := shownHolder(t, ctx, e); h != backingOffHolder {
			t.Errorf("just before the wait ends client-go is shown holder %q, want %q", h, backingOffHolder)
		}
		clk.step(time.Nanosecond)
	}
	if h := shownHolder(t, ctx, e); h != "" {
		t.Errorf("once the wait has ended client-go is shown holder %q, want none", h)
	}
}

// TestElectorWaitsOutBackoff: after a lost race, the next takeover waits
// for the drawn delay (12.5 ms here): until then client-go is shown the
// Lease as held and the attempt timer has not fired; then it is shown
// free and a round is started. A candidate that lost no race tries at once.
func TestElectorWaitsOutBackoff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		lostRace bool
		wantWait time.Duration
	}{
		{name: "no race lost: at once"},
		{name: "one race lost: after the drawn delay", lostRace: true, wantWait: 12500 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			e, clk, _ := newBackoffElector(t, CampaignAuto)
			rounds := countRounds(e)
			if tc.lostRace {
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.Observe(leaseVersion("pod-b", "3", t0))
			}
			// Released: with nothing to wait for, the attempt timer is
			// due at once; after a wait it is armed a millisecond late, so
			// that the moment has certainly passed.
			e.cache.Observe(leaseVersion("", "4", clk.Now()))
			expectHeldFor(t, ctx, e, clk, tc.wantWait)
			if tc.wantWait > 0 {
				clk.step(time.Millisecond - time.Nanosecond)
				if n := rounds.Load(); n != 0 {
					t.Fatalf("%d rounds started before the attempt was due", n)
				}
				clk.step(time.Nanosecond)
			} else {
				clk.step(0)
			}
			if n := rounds.Load(); n != 1 {
				t.Fatalf("%d rounds started when the attempt was due, want 1", n)
			}
		})
	}
}

// TestElectorWaitsForItsRank: with the candidates ranked
// (Config.TakeoverRank), a Lease whose holder's claim ran out is tried at
// the expiry by the first, a racebackoff.Slot (200 ms here) later by the second, and so
// on up to half a retry period (1 s here), whatever races each lost before: the rank
// replaces the back-off. Without a rank (-1) the back-off applies. The
// rank is asked with the holder and token of the term that ended.
func TestElectorWaitsForItsRank(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rank     int
		lostRace bool
		wantWait time.Duration
	}{
		{name: "first: at the expiry", rank: 0},
		{name: "first after a lost race: still at the expiry", rank: 0, lostRace: true},
		{name: "third: two slots later", rank: 2, wantWait: 2 * racebackoff.Slot(2*time.Second)},
		{name: "hundredth: at most half a retry period", rank: 99, wantWait: racebackoff.Max(2 * time.Second)},
		{name: "no rank: the back-off after a lost race", rank: -1, lostRace: true, wantWait: 12500 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			type asked struct {
				holder string
				token  int64
			}
			var (
				mu   sync.Mutex
				last asked
			)
			e, clk, _ := newBackoffElectorWith(t, func(cfg *Config) {
				cfg.TakeoverRank = func(holder string, token int64) int {
					mu.Lock()
					defer mu.Unlock()
					last = asked{holder, token}
					return tc.rank
				}
			})
			rounds := countRounds(e)
			if tc.lostRace {
				e.cache.Observe(leaseVersion("", "2", t0))
				e.cache.Observe(leaseVersion("pod-b", "3", t0))
			}
			// pod-c's claim (15 s, token 4) runs out.
			e.cache.Observe(leaseVersion("pod-c", "4", clk.Now()))
			clk.step(15 * time.Second)
			expectHeldFor(t, ctx, e, clk, tc.wantWait)
			clk.step(time.Millisecond)
			if n := rounds.Load(); n != 1 {
				t.Fatalf("%d rounds started when its turn came, want 1", n)
			}
			mu.Lock()
			defer mu.Unlock()
			if last != (asked{"pod-c", 4}) {
				t.Errorf("the rank was asked for %+v, want pod-c's term 4", last)
			}
		})
	}
}

// TestLockWinResetsBackoff: a successful takeover write starts the back-off
// over, so the winner's next race is tried at once.
func TestLockWinResetsBackoff(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	l := newTestLock(t, []string{"get", "update"}, newLease("", 3, t0))
	l.backoff = racebackoff.New(l.clock, 2*time.Second, 15*time.Second)
	l.backoff.Lost()
	getOrFail(t, ctx, l)
	if err := l.Update(ctx, ownRecord(4, l.clock.Now())); err != nil {
		t.Fatalf("Update: %v", err)
	}
	if n := l.backoff.LostInARow(); n != 0 {
		t.Errorf("races lost after a win = %d, want 0", n)
	}
}

// TestLockNoTakeoverWriteOnceTaken: a candidate about to take a released
// Lease (client-go has read it free) that then sees, through the watch,
// another holder take it sends no write at all: the API server is spared
// a write that could only conflict.
func TestLockNoTakeoverWriteOnceTaken(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	released := leaseVersion("", "1", t0)
	e, clk, client := newBackoffElector(t, CampaignAuto, released)
	e.cache.Observe(released)
	rec, _, err := e.lock.Get(ctx)
	if err != nil || rec.HolderIdentity != "" {
		t.Fatalf("Get = %+v, %v; want the released Lease", rec, err)
	}
	taken := leaseVersion("pod-b", "2", clk.Now())
	if err := client.Tracker().Update(leasesGVR, taken, testNamespace); err != nil {
		t.Fatal(err)
	}
	e.cache.Observe(taken)
	if err := e.lock.Update(ctx, ownRecord(5, clk.Now())); !errors.Is(err, errNotExpired) {
		t.Errorf("Update = %v, want %v", err, errNotExpired)
	}
	if n := countActions(client, "update"); n != 0 {
		t.Errorf("%d updates sent, want none", n)
	}
}

// TestElectorRunStartedDuringItsBackoff: an elector whose run starts
// while it waits out its back-off on a released Lease (partition mode
// starts a partition's elector when a watch event shows it free; the
// change that started the wait came before the run) tries when the wait
// ends, not at client-go's next retry a retry period later.
func TestElectorRunStartedDuringItsBackoff(t *testing.T) {
	t.Parallel()
	// startSlack bounds the rest of the path from the end of the wait to
	// the acquisition on the fake API server: a round restarted, a read of
	// the cache, a write. Far below the retry period, which a run that
	// armed no timer would wait.
	const startSlack = 2 * time.Second
	_, ctx := ktesting.NewTestContext(t)
	released := newLease("", 3, time.Now())
	released.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	client := newFakeClient(t, electorVerbs, released)
	cfg := testConfig(client)
	cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod = 30*time.Second, 20*time.Second, 10*time.Second
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.backoff.Random = half
	// Six races lost: the window has doubled to 800 ms, the wait is 400 ms.
	for range 6 {
		e.backoff.Lost()
	}
	backoff := e.backoff.Wait()
	if backoff < 100*time.Millisecond || backoff+startSlack >= cfg.RetryPeriod {
		t.Fatalf("back-off %v: the test needs one the first round certainly meets and far below the retry period", backoff)
	}
	primeCache(e.cache, released)
	start := time.Now()
	runElector(t, ctx, e)
	waitFor(t, ctx, "the acquisition", func() bool { return e.Snapshot().IsLeader })
	if took := time.Since(start); took > backoff+startSlack {
		t.Errorf("acquired %v after the run started, want within the back-off (%v) + %v", took, backoff, startSlack)
	}
}
