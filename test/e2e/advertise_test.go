//go:build integration

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/holderaddress"
)

// TestAdvertiseAddress: three candidates advertise distinct addresses
// (127.0.0.1 with ports nothing listens on: the sidecar only publishes
// them). Every pod's GET /leader shows the leader's address; after POST
// /release and after SIGKILL of the leader every pod shows the new
// leader's. Over the whole run, the monitor's answers (every pod, every
// 20 ms) never pair a holder with another pod's address or with a token
// the Lease did not name that holder with, and once a killed leader's lease has
// expired no pod shows it or its address. Every version of the Lease the
// store delivers carries the address of exactly the term it names. On both
// lease stores.
func TestAdvertiseAddress(t *testing.T) {
	t.Parallel()
	onEachStore(t, testAdvertiseAddress)
}

func testAdvertiseAddress(t *testing.T, store leaseStore) {
	lease := leaseName(t)
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	leases := watchLeaseVersions(t, store.client, lease)

	addressOf := map[string]string{}
	start := func(name string, port int) {
		addressOf[name] = fmt.Sprintf("127.0.0.1:%d", port)
		g.Add(startCandidate(t, name, store.on(candidateOptions{lease: lease, extraArgs: []string{"--advertise-address=127.0.0.1", fmt.Sprintf("--advertise-port=%d", port)}})))
	}
	for i := range 3 {
		start(fmt.Sprintf("%s-%d", lease, i), 17001+i)
	}

	// everyPodShows waits until every running candidate shows leader as
	// the holder with its address.
	everyPodShows := func(leader *candidate) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			for _, c := range g.Members() {
				if !c.running() {
					continue
				}
				s, err := c.state()
				if err != nil || s.Holder != leader.name || s.HolderAddress != addressOf[leader.name] {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			for _, c := range g.Members() {
				if c.running() {
					s, err := c.state()
					t.Logf("%s: holder %q, holderAddress %q (%v)", c.name, s.Holder, s.HolderAddress, err)
				}
			}
			t.Fatalf("not every pod shows %s at %s", leader.name, addressOf[leader.name])
		}
	}

	leader := g.WaitLeader(giveUp)
	everyPodShows(leader)

	// A graceful handover.
	if code, _, body, err := leader.do("POST", "/release", nil); err != nil || code != 200 {
		t.Fatalf("POST /release on the leader = %d %s %v", code, body, err)
	}
	next := g.WaitLeader(handoverBound, leader)
	everyPodShows(next)

	// A crash: the term ends by expiry only. Its last renewal was sent
	// before the process exited; every pod has seen it within moments
	// (e2eSlack), and counts the lease duration from then.
	next.signal(syscall.SIGKILL)
	if _, err := next.waitExit(giveUp); err != nil {
		t.Fatal(err)
	}
	expired := time.Now().Add(leaseDuration + e2eSlack)
	third := g.WaitLeader(takeoverBound, next)
	everyPodShows(third)

	// The monitor's answers: every address shown is the shown holder's own,
	// with a token that holder led with, and none for the killed leader's
	// term once its lease has expired by every pod's observation.
	g.monitor.mu.Lock()
	obs := append([]observation(nil), g.monitor.obs...)
	g.monitor.mu.Unlock()
	// The terms the Lease named (every version the store delivered).
	versions := leases()
	terms := map[string]bool{}
	for _, l := range versions {
		terms[fmt.Sprintf("%s/%d", ptr.Deref(l.Spec.HolderIdentity, ""), ptr.Deref(l.Spec.LeaseTransitions, -1))] = true
	}
	withAddress := 0
	for _, o := range obs {
		s := o.state
		if s.HolderAddress != "" {
			withAddress++
			if s.Holder == "" || s.HolderAddress != addressOf[s.Holder] {
				t.Errorf("%s at %s: holder %q shown with address %q (its own is %q)", o.who, stamp(o.sent), s.Holder, s.HolderAddress, addressOf[s.Holder])
			}
			if !terms[fmt.Sprintf("%s/%d", s.Holder, s.FencingToken)] {
				t.Errorf("%s at %s: address %q shown for %s's token %d, a term the Lease never named", o.who, stamp(o.sent), s.HolderAddress, s.Holder, s.FencingToken)
			}
		}
		if o.sent.After(expired) && (s.Holder == next.name || s.HolderAddress == addressOf[next.name]) {
			t.Errorf("%s at %s, after the killed leader's lease expired (%s): holder %q, address %q", o.who, stamp(o.sent), stamp(expired), s.Holder, s.HolderAddress)
		}
	}
	if withAddress == 0 {
		t.Error("no answer of the run showed an address")
	}
	t.Logf("%d answers, %d with an address", len(obs), withAddress)

	// The Lease itself: every version names the address of its own term in
	// the same write; a released Lease carries none.
	for _, l := range versions {
		holder := ptr.Deref(l.Spec.HolderIdentity, "")
		value, ok := l.Annotations[holderaddress.Annotation]
		if holder == "" {
			if ok {
				t.Errorf("Lease version %s without a holder carries %s", l.ResourceVersion, value)
			}
			continue
		}
		var a struct {
			Holder       string `json:"holder"`
			FencingToken int64  `json:"fencingToken"`
			Address      string `json:"address"`
		}
		if err := json.Unmarshal([]byte(value), &a); err != nil || a.Holder != holder || a.FencingToken != int64(ptr.Deref(l.Spec.LeaseTransitions, -1)) || a.Address != addressOf[holder] {
			t.Errorf("Lease version %s of %s's term %d carries %q", l.ResourceVersion, holder, ptr.Deref(l.Spec.LeaseTransitions, -1), value)
		}
	}
}

// watchLeaseVersions records every version of the Lease the store behind
// client delivers from now until the test ends; the returned function
// lists them. (A file store's watch may skip a version written moments
// before the next: it reads the file once per change it is told of.)
func watchLeaseVersions(t *testing.T, client kubernetes.Interface, lease string) func() []coordinationv1.Lease {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := client.CoordinationV1().Leases("default").Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", lease).String()})
	if err != nil {
		cancel()
		t.Fatalf("watch the Lease: %v", err)
	}
	var mu sync.Mutex
	var versions []coordinationv1.Lease
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*coordinationv1.Lease); ok {
				mu.Lock()
				versions = append(versions, *l.DeepCopy())
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		w.Stop()
		<-done
	})
	return func() []coordinationv1.Lease {
		mu.Lock()
		defer mu.Unlock()
		if len(versions) == 0 {
			t.Error("the watch delivered no version of the Lease")
		}
		return append([]coordinationv1.Lease(nil), versions...)
	}
}
