//go:build integration

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
)

// notification is one POST a receiver got from its sidecar.
type notification struct {
	revision uint64 // from the Leader-Elector-Revision header
	body     string
	leader   api.Leader
}

// notifyReceiver is the app of one pod: a loopback HTTP server that takes
// --on-change-url's notifications with the handler docs/api.md shows, and
// records every request that reaches it.
type notifyReceiver struct {
	url string

	mu      sync.Mutex
	arrived []notification // every POST, in the order of arrival
	taken   []api.Leader   // what the docs' handler passed on to the app
}

func newNotifyReceiver(t *testing.T) *notifyReceiver {
	rc := &notifyReceiver{}
	setLeading := func(isLeader bool, token int64) {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		rc.taken = append(rc.taken, api.Leader{IsLeader: isLeader, FencingToken: token})
	}
	mux := http.NewServeMux()

	// The receiving app of docs/api.md, line for line (TestDocSnippets
	// checks it).
	var last atomic.Uint64 // the newest revision taken
	mux.HandleFunc("POST /leader-changed", func(w http.ResponseWriter, r *http.Request) {
		var l api.Leader // or any JSON decoding of the GET /leader fields
		if err := json.NewDecoder(r.Body).Decode(&l); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if l.Revision <= last.Load() {
			w.WriteHeader(http.StatusNoContent) // a retry of one already taken
			return
		}
		last.Store(l.Revision)
		setLeading(l.IsLeader, l.FencingToken) // the app's own reaction; keep it short
		w.WriteHeader(http.StatusNoContent)
	})

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("receiver: %v", err)
			return
		}
		n := notification{body: string(body)}
		n.revision, err = strconv.ParseUint(r.Header.Get("Leader-Elector-Revision"), 10, 64)
		if err != nil || r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &n.leader) != nil || n.leader.Revision != n.revision {
			t.Errorf("receiver: malformed notification: %s %s %v %q", r.Method, r.URL, r.Header, body)
		}
		rc.mu.Lock()
		rc.arrived = append(rc.arrived, n)
		rc.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rc.url = srv.URL + "/leader-changed"
	return rc
}

func (rc *notifyReceiver) notifications() []notification {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]notification(nil), rc.arrived...)
}

func revisions(ns []notification) []uint64 {
	var revs []uint64
	for _, n := range ns {
		revs = append(revs, n.revision)
	}
	return revs
}

// eventLog records a pod's GET /events stream: revision → data, and when
// each arrived.
type eventLog struct {
	mu     sync.Mutex
	events map[uint64]string
	at     map[uint64]time.Time
	order  []uint64
}

func followEvents(t *testing.T, c *candidate) *eventLog {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.apiURL+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	l := &eventLog{events: map[uint64]string{}, at: map[uint64]time.Time{}}
	first := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var id uint64
		event := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "event: "):
				event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && event == "leader":
				l.mu.Lock()
				if _, seen := l.events[id]; !seen {
					l.order = append(l.order, id)
					l.at[id] = time.Now()
					if len(l.order) == 1 {
						close(first)
					}
				}
				l.events[id] = strings.TrimPrefix(line, "data: ")
				l.mu.Unlock()
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(giveUp):
		t.Fatalf("%s: no first event on GET /events", c.name)
	}
	return l
}

// lasted is how long the state of revision rev stood before the next one
// arrived on the stream; forever for the last.
func (l *eventLog) lasted(rev uint64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, r := range l.order {
		if r == rev && i+1 < len(l.order) {
			return l.at[l.order[i+1]].Sub(l.at[rev])
		}
	}
	return time.Duration(1<<63 - 1)
}

func (l *eventLog) snapshot() ([]uint64, map[uint64]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := make(map[uint64]string, len(l.events))
	for k, v := range l.events {
		m[k] = v
	}
	return append([]uint64(nil), l.order...), m
}

// notifiedPod is a candidate with its app and its event stream.
type notifiedPod struct {
	c      *candidate
	app    *notifyReceiver
	events *eventLog
}

// sameState reports whether two GET /leader JSON bodies describe the same
// state: equal in every field but renewTime and validUntil, which move on
// with each renewal without a new revision, and validForMs.
func sameState(a, b string) bool {
	var ma, mb map[string]any
	if json.Unmarshal([]byte(a), &ma) != nil || json.Unmarshal([]byte(b), &mb) != nil {
		return false
	}
	for _, m := range []map[string]any{ma, mb} {
		delete(m, "renewTime")
		delete(m, "validUntil")
		// GET /leader's time left, measured as it answers; notifications
		// leave it out, since they are read later than they are written.
		delete(m, "validForMs")
	}
	return reflect.DeepEqual(ma, mb)
}

// caughtUp waits until p's app has the state GET /leader answers now, and
// checks that the body is GET /leader's (a newline-terminated JSON object
// of the same state).
func (p *notifiedPod) caughtUp(t *testing.T) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		code, _, body, err := p.c.do("GET", "/leader", nil)
		if err != nil || code != 200 {
			return false, nil
		}
		ns := p.app.notifications()
		if len(ns) == 0 {
			return false, nil
		}
		last = ns[len(ns)-1].body
		return strings.HasSuffix(last, "}\n") && sameState(last, string(body)), nil
	})
	if err != nil {
		s, _ := p.c.state()
		t.Fatalf("%s's app did not catch up: last notification %q, GET /leader %+v", p.c.name, last, s)
	}
}

// check: the app got every revision, one by one in order (the elector hands
// the notifier each new state; the stream may skip one that was overtaken
// before it read it, the notifier may not); every revision the pod's event
// stream showed, with the same state; and every term the pod led.
func (p *notifiedPod) check(t *testing.T) {
	t.Helper()
	ns := p.app.notifications()
	delivered := map[uint64]string{}
	ledTerms := map[int64]bool{}
	for i, n := range ns {
		if i > 0 && n.revision != ns[i-1].revision+1 {
			t.Errorf("%s: notifications not every revision in order: %v", p.c.name, revisions(ns))
		}
		delivered[n.revision] = n.body
		if n.leader.IsLeader {
			ledTerms[n.leader.FencingToken] = true
		}
	}
	order, events := p.events.snapshot()
	for _, rev := range order {
		var streamed api.Leader
		if err := json.Unmarshal([]byte(events[rev]), &streamed); err != nil {
			t.Fatalf("%s: event %d: %v", p.c.name, rev, err)
		}
		if streamed.IsLeader && !ledTerms[streamed.FencingToken] {
			t.Errorf("%s led with token %d (GET /events), its app was never told", p.c.name, streamed.FencingToken)
		}
		body, ok := delivered[rev]
		switch {
		case !ok:
			t.Errorf("%s: GET /events showed revision %d, which stood for %v; the app never got it (got %v, stream %v)", p.c.name, rev, p.events.lasted(rev), revisions(ns), order)
		case !strings.HasSuffix(body, "}\n") || !sameState(body, events[rev]):
			t.Errorf("%s: revision %d: notified %q, streamed %q", p.c.name, rev, body, events[rev])
		}
	}
	t.Logf("%s: %d notifications %v; its stream showed %d of those revisions", p.c.name, len(ns), revisions(ns), len(order))
}

func startNotifiedPod(t *testing.T, g *group, i int, extra ...string) *notifiedPod {
	app := newNotifyReceiver(t)
	c := startCandidate(t, fmt.Sprintf("%s-%d", g.lease, i), candidateOptions{
		lease: g.lease,
		// A generous timeout: this test is about order and completeness,
		// not about a slow app.
		extraArgs: append([]string{"--on-change-url=" + app.url, "--on-change-timeout=10s"}, extra...),
	})
	g.Add(c)
	return &notifiedPod{c: c, app: app, events: followEvents(t, c)}
}

func newNotifyGroup(t *testing.T) *group {
	g := groupOf(t, leaseName(t))
	g.monitor = startMonitor(t, g.Members)
	return g
}

// TestChangeNotificationsInOrder: three sidecars with --on-change-url; an
// election, a POST /release, a SIGKILL of the leader and its takeover, and
// a graceful shutdown. Each app gets every change its pod's GET /events
// showed, in order, with GET /leader's bytes, and the last state (not
// leader) at shutdown.
func TestChangeNotificationsInOrder(t *testing.T) {
	t.Parallel()
	g := newNotifyGroup(t)
	var pods []*notifiedPod
	for i := range 3 {
		pods = append(pods, startNotifiedPod(t, g, i))
	}
	pod := func(c *candidate) *notifiedPod {
		for _, p := range pods {
			if p.c == c {
				return p
			}
		}
		t.Fatalf("no pod %s", c.name)
		return nil
	}
	settled := func(live ...*notifiedPod) {
		t.Helper()
		for _, p := range live {
			p.caughtUp(t)
		}
	}

	first := g.WaitLeader(giveUp)
	settled(pods...)

	// The leader lets go; another takes over.
	if code, _, body, err := first.do("POST", "/release", nil); err != nil || code != 200 {
		t.Fatalf("POST /release = %d %s %v", code, body, err)
	}
	second := g.WaitLeader(handoverBound, first)
	settled(pods...)

	// The new leader dies without a word; the third takes over after the
	// lease runs out (first sits out its release for a lease duration,
	// then competes again: either may win).
	pod(second).check(t)
	second.signal(syscall.SIGKILL)
	if _, err := second.waitExit(giveUp); err != nil {
		t.Fatal(err)
	}
	third := g.WaitLeader(takeoverBound, second)
	var live []*notifiedPod
	for _, p := range pods {
		if p.c != second {
			live = append(live, p)
		}
	}
	settled(live...)

	// Graceful shutdown: the app hears of the last state before exit.
	for _, p := range live {
		p.check(t)
	}
	for _, p := range live {
		p.c.signal(syscall.SIGTERM)
		if code, err := p.c.waitExit(giveUp); err != nil || code != 0 {
			t.Fatalf("%s exit %d %v", p.c.name, code, err)
		}
	}
	for _, p := range live {
		p.check(t) // including what the stream showed of the shutdown
		ns := p.app.notifications()
		if len(ns) == 0 {
			t.Fatalf("%s: no notifications", p.c.name)
		}
		lastState := ns[len(ns)-1].leader
		if lastState.IsLeader {
			t.Errorf("%s: the last notification before exit says isLeader: %s", p.c.name, ns[len(ns)-1].body)
		}
		if p.c == third {
			var led bool
			for _, n := range ns {
				led = led || n.leader.IsLeader
			}
			if !led {
				t.Errorf("%s led, but its app was never told: %v", p.c.name, revisions(ns))
			}
		}
		// The docs' handler passed on every notification (none repeated).
		p.app.mu.Lock()
		taken := len(p.app.taken)
		p.app.mu.Unlock()
		if taken != len(ns) {
			t.Errorf("%s: the app took %d of %d notifications", p.c.name, taken, len(ns))
		}
	}
	// The killed pod's app had every change up to its death.
	pod(second).check(t)
	var secondLed bool
	for _, n := range pod(second).app.notifications() {
		secondLed = secondLed || n.leader.IsLeader
	}
	if !secondLed {
		t.Errorf("%s led, but its app was never told", second.name)
	}
}

// TestChangeNotificationsSlowAppKeepsLeading: an app that never answers
// (its handler blocks for longer than the renew deadline, until the test
// ends) does not keep its pod from leading: the pod renews the Lease again
// and again while its notifications time out, and a competitor never takes
// over.
func TestChangeNotificationsSlowAppKeepsLeading(t *testing.T) {
	t.Parallel()
	stuck := make(chan struct{})
	var arrived atomic.Int64
	app := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select {
		case <-stuck:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(stuck)
		app.Close()
	})
	g := newNotifyGroup(t)
	// Each attempt outlasts the renew deadline (2s), and so does the wait
	// of every change queued behind it.
	slow := startCandidate(t, g.lease+"-slow", candidateOptions{lease: g.lease, extraArgs: []string{
		"--on-change-url=" + app.URL + "/leader-changed", "--on-change-timeout=3s", "--on-change-retries=1",
	}})
	g.Add(slow)
	if leader := g.WaitLeader(giveUp); leader != slow {
		t.Fatalf("%s leads, want %s", leader.name, slow.name)
	}
	g.Add(startCandidate(t, g.lease+"-other", candidateOptions{lease: g.lease}))

	start, err := slow.state()
	if err != nil {
		t.Fatal(err)
	}
	// Several lease durations: many renewals, several notification
	// timeouts.
	err = holdsFor(4*leaseDuration, 50*time.Millisecond, func() error {
		s, err := slow.state()
		if err != nil {
			return err
		}
		if !s.IsLeader || s.FencingToken != start.FencingToken {
			return fmt.Errorf("%s stopped leading: %+v", slow.name, s)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	end, err := slow.state()
	if err != nil {
		t.Fatal(err)
	}
	if renewed := end.RenewTime.Sub(start.RenewTime.Time); renewed < 3*leaseDuration {
		t.Errorf("renewTime moved by %v over %v, want renewals throughout", renewed, 4*leaseDuration)
	}
	fams := scrapeUntil(t, slow, func(fams map[string]*dto.MetricFamily) bool {
		return series(fams, "leader_elector_change_notifications_total", map[string]string{"result": "failed"}).GetCounter().GetValue() >= 1
	})
	failed := series(fams, "leader_elector_change_notifications_total", map[string]string{"result": "failed"}).GetCounter().GetValue()
	if !strings.Contains(slow.log(), "Gave up a change notification") {
		t.Error("no log line for the notification given up")
	}
	t.Logf("%s led throughout; renewTime moved %v; %d notification attempts reached the app, %v given up", slow.name, end.RenewTime.Sub(start.RenewTime.Time).Round(time.Millisecond), arrived.Load(), failed)
	if arrived.Load() < 2 {
		t.Errorf("only %d notification attempts reached the app", arrived.Load())
	}
}
