// Package notify delivers --on-change-url: it POSTs the GET /leader JSON
// (in partition mode, the GET /partitions JSON) to the app at every change
// of the state, in order, from goroutines
// of its own so that the elector never waits for the app. It is the one
// outbound HTTP client of the sidecar, kept apart from httpapi (which only
// answers) so that each package has one direction.
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/httpapi"
	"github.com/leader-elector/leader-elector/leadership"
	"github.com/leader-elector/leader-elector/ownership"
)

// RevisionHeader carries the notification's revision, so that an app can
// drop a duplicate without parsing the body.
const RevisionHeader = "Leader-Elector-Revision"

// Defaults of Options.
const (
	DefaultTimeout = 2 * time.Second
	DefaultRetries = 3
	// defaultNotifyQueue bounds the changes waiting for a slow app. Changes
	// come at most a few per lease duration; 128 is minutes of them.
	defaultNotifyQueue = 128
	// defaultNotifyFlush bounds the delivery of what is queued at shutdown:
	// the last state ("not leader") matters to the app, but the pod must
	// still stop well within its termination grace period.
	defaultNotifyFlush = 2 * time.Second
	// notifyFirstBackoff and notifyMaxBackoff: the wait before the first
	// retry doubles up to the cap; a receiver that is restarting is back in
	// a second or two, and a longer wait would only delay the next change.
	notifyFirstBackoff = 100 * time.Millisecond
	notifyMaxBackoff   = 2 * time.Second
	// notifyResponseLimit is how much of an answer is read (and dropped)
	// so that the connection can be reused.
	notifyResponseLimit = 64 << 10
)

// Options configure the change notifications (--on-change-url).
type Options struct {
	// URL is where each new state is POSTed; empty: no notifications.
	// Options accept only http:// to a loopback address.
	URL string
	// Timeout bounds each attempt; DefaultTimeout if zero.
	Timeout time.Duration
	// Retries is how many times a failed delivery is retried before it is
	// given up (0: one attempt).
	Retries int
	// QueueSize bounds the undelivered changes; 128 if zero.
	QueueSize int
	// FlushTimeout bounds the delivery of what is queued once Run's context
	// ends; 2s if zero.
	FlushTimeout time.Duration
}

// Source is the election as the notifier follows it (httpapi.Election
// has these methods too).
type Source interface {
	Snapshot() leadership.State
	Watch() (leadership.State, <-chan struct{})
}

// PartitionsSource is a partition group's member as the notifier follows it
// (httpapi.Partitions has this method too).
type PartitionsSource interface {
	Watch() (ownership.State, <-chan struct{})
}

// state is one revision of what the notifier follows, with its body.
type state struct {
	revision uint64
	encode   func() ([]byte, error)
}

func ofLeader(s leadership.State) state {
	return state{revision: s.Revision, encode: func() ([]byte, error) { return httpapi.LeaderBody(s) }}
}

// Notifier POSTs the GET /leader JSON to the app at every change of the
// election state, in order. The elector gives it every new state through
// Observe (election.Config.OnState), which only queues it; it also follows
// the state through Source.Watch, as the long-poll does, for its first
// and last states (and for a Source without the hook). It delivers on
// goroutines of its own: the elector never waits for it, and a slow or
// absent app delays only its own notifications.
type Notifier struct {
	// watch returns the current state and a channel closed at its next
	// change.
	watch  func() (state, <-chan struct{})
	opts   Options
	client *http.Client

	mu sync.Mutex
	// queue holds the changes not yet delivered, oldest first.
	queue []notification
	// lastQueued is the revision queued last (tests wait for it);
	// queuedAny says whether there is one.
	lastQueued uint64
	queuedAny  bool
	// wake is signalled (without blocking) when the queue grows or the
	// follower ends.
	wake chan struct{}
	// followed is closed when the follower has queued its last state.
	followed chan struct{}

	results *prometheus.CounterVec
}

type notification struct {
	revision uint64
	body     []byte
}

// Results of a notification, the values of the result label.
const (
	notifyDelivered = "delivered"
	notifyFailed    = "failed"
	notifyDropped   = "dropped"
)

// New returns a notifier of el's changes; Run starts it.
func New(el Source, opts Options) *Notifier {
	return newNotifier(func() (state, <-chan struct{}) {
		s, changed := el.Watch()
		return ofLeader(s), changed
	}, opts)
}

// NewPartitions returns a notifier of a partition member's changes, which
// POSTs the GET /partitions JSON. A member has no hook that hands over each
// state as the elector's OnState does: the notifier reads the state at each
// change, so that changes quicker than it reads are delivered as the
// latest, never out of order.
func NewPartitions(p PartitionsSource, opts Options) *Notifier {
	return newNotifier(func() (state, <-chan struct{}) {
		s, changed := p.Watch()
		return state{revision: s.Revision, encode: func() ([]byte, error) { return httpapi.PartitionsBody(s) }}, changed
	}, opts)
}

func newNotifier(watch func() (state, <-chan struct{}), opts Options) *Notifier {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Retries < 0 {
		opts.Retries = 0
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultNotifyQueue
	}
	if opts.FlushTimeout <= 0 {
		opts.FlushTimeout = defaultNotifyFlush
	}
	n := &Notifier{
		watch:    watch,
		opts:     opts,
		client:   loopbackClient(opts.Timeout),
		wake:     make(chan struct{}, 1),
		followed: make(chan struct{}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "leader_elector_change_notifications_total",
			Help: "Change notifications to --on-change-url, by result: delivered (a 2xx answer), failed (given up after the retries) or dropped (overtaken while the queue was full).",
		}, []string{"result"}),
	}
	for _, r := range []string{notifyDelivered, notifyFailed, notifyDropped} {
		n.results.WithLabelValues(r) // every result is exported from the start, as 0
	}
	return n
}

// Collectors returns the notifier's Prometheus collectors.
func (n *Notifier) Collectors() []prometheus.Collector {
	return []prometheus.Collector{n.results}
}

// loopbackClient is an HTTP client that connects to loopback addresses
// only, whatever a host name resolves to, uses no proxy and follows no
// redirect: the notifications go to the app in the same pod, and a sidecar
// that could be made to POST elsewhere would be a request-forgery gadget.
func loopbackClient(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{
		Timeout: timeout,
		// Control sees the address after name resolution, just before the
		// connection is made.
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("notification address %q: %w", address, err)
			}
			if !ap.Addr().Unmap().IsLoopback() {
				return fmt.Errorf("notification address %s is not a loopback address", ap.Addr())
			}
			return nil
		},
	}
	return &http.Client{
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         dialer.DialContext,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Run notifies until ctx ends, then delivers what is still queued,
// including the state at that moment, within the flush timeout. Cancel ctx
// after the elector has stopped so that its last state ("not leader") is
// among them.
func (n *Notifier) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("url", n.opts.URL)
	ctx = klog.NewContext(ctx, logger)

	deliverCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stopFlush := context.AfterFunc(ctx, func() {
		// The flush gets its bound once the notifier is asked to stop.
		time.AfterFunc(n.opts.FlushTimeout, cancel)
	})
	defer stopFlush()

	go n.follow(ctx)
	n.deliver(deliverCtx)
}

// follow queues every new revision of the state until ctx ends, then the
// state at that moment.
func (n *Notifier) follow(ctx context.Context) {
	defer close(n.followed)
	defer n.signal()
	var last uint64
	first := true
	for {
		s, changed := n.watch()
		if first || s.revision != last {
			n.enqueue(ctx, s)
			last, first = s.revision, false
		}
		select {
		case <-changed:
		case <-ctx.Done():
			if s, _ := n.watch(); s.revision != last {
				n.enqueue(ctx, s)
			}
			return
		}
	}
}

// Observe queues s, a new state: set it as the elector's OnState. It never
// blocks (it runs under the election state's lock).
func (n *Notifier) Observe(s leadership.State) {
	n.enqueue(context.Background(), ofLeader(s))
}

// enqueue adds s to the queue, unless a state of its revision or a later
// one is queued already (Observe and the follower both see every state the
// follower reads); when the queue is full, the oldest change waiting is
// dropped: the app learns the newer state instead.
func (n *Notifier) enqueue(ctx context.Context, s state) {
	n.mu.Lock()
	queued := n.queuedAny && s.revision <= n.lastQueued
	n.mu.Unlock()
	if queued {
		return
	}
	body, err := s.encode()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Cannot encode a change notification", "revision", s.revision)
		return
	}
	n.mu.Lock()
	if n.queuedAny && s.revision <= n.lastQueued {
		n.mu.Unlock()
		return
	}
	n.queuedAny = true
	if len(n.queue) >= n.opts.QueueSize {
		n.queue = n.queue[1:]
		n.results.WithLabelValues(notifyDropped).Inc()
	}
	// As GET /leader answers, with the trailing newline.
	n.queue = append(n.queue, notification{revision: s.revision, body: body})
	n.lastQueued = s.revision
	n.mu.Unlock()
	n.signal()
}

func (n *Notifier) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest queued change; false when there is none.
func (n *Notifier) next() (notification, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.queue) == 0 {
		return notification{}, false
	}
	m := n.queue[0]
	n.queue = n.queue[1:]
	return m, true
}

// deliver sends the queue in order until the follower has ended and the
// queue is empty, or ctx ends.
func (n *Notifier) deliver(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		m, ok := n.next()
		if !ok {
			select {
			case <-n.followed:
				// The follower queues its last state before it closes
				// followed; that state may have arrived after next.
				if m, ok = n.next(); !ok {
					return
				}
			case <-n.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := n.send(ctx, m); err != nil {
			n.results.WithLabelValues(notifyFailed).Inc()
			logger.Info("Gave up a change notification; going on with the next", "revision", m.revision, "attempts", n.opts.Retries+1, "err", err)
			if ctx.Err() != nil {
				n.dropRest(logger)
				return
			}
			continue
		}
		n.results.WithLabelValues(notifyDelivered).Inc()
	}
}

// dropRest counts what the flush timeout left undelivered.
func (n *Notifier) dropRest(logger klog.Logger) {
	n.mu.Lock()
	left := len(n.queue)
	n.queue = nil
	n.mu.Unlock()
	if left > 0 {
		n.results.WithLabelValues(notifyFailed).Add(float64(left))
		logger.Info("Change notifications left undelivered at shutdown", "count", left)
	}
}

// send POSTs m, retrying with a capped exponential backoff.
func (n *Notifier) send(ctx context.Context, m notification) error {
	var last error
	backoff := wait.Backoff{Duration: notifyFirstBackoff, Factor: 2, Jitter: 0.1, Steps: n.opts.Retries + 1, Cap: notifyMaxBackoff}
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		last = n.attempt(ctx, m)
		if last != nil {
			klog.FromContext(ctx).V(4).Info("Change notification attempt failed", "revision", m.revision, "err", last)
		}
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// attempt POSTs m once, within the timeout; a 2xx answer is success.
func (n *Notifier) attempt(ctx context.Context, m notification) error {
	ctx, cancel := context.WithTimeout(ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.opts.URL, bytes.NewReader(m.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(RevisionHeader, strconv.FormatUint(m.revision, 10))
	resp, err := n.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return fmt.Errorf("no answer within %v", n.opts.Timeout)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, notifyResponseLimit))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}
