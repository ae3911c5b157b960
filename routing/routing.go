// Package routing publishes the leader to a Service, so that pods can stay
// Ready as candidates while traffic goes to the leader alone. In
// endpointslice mode the leader writes the EndpointSlice of a Service
// without a selector; in label mode every pod labels itself and the leader
// clears the label of any other pod of its Lease that still claims it.
//
// Every write that routes traffic to this pod is fenced: it is sent only
// while this pod claims leadership for the term it publishes, it is bounded
// by the end of that claim, it never overwrites the fencing token of a
// newer term of the Lease, and it is conditional on the resourceVersion it
// read. A token that no term of the Lease wrote is overwritten (see fence).
package routing

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// Mode is how traffic is routed to the leader (--route).
type Mode string

const (
	// ModeNone routes nothing: a Service routes by readiness alone.
	ModeNone Mode = "none"
	// ModeEndpointSlice: the leader writes the EndpointSlice of a Service
	// without a selector.
	ModeEndpointSlice Mode = "endpointslice"
	// ModeLabel: the leader's pod carries the leader label "true".
	ModeLabel Mode = "label"
)

// Labels and annotations this package writes.
const (
	// DefaultLeaderLabel is the label label mode sets by default.
	DefaultLeaderLabel = "leader-elector.io/leader"
	// GroupLabel names, on each pod in label mode, the Lease it elects on,
	// so that a leader clears the label of its own group's pods only.
	GroupLabel = "leader-elector.io/lease"
	// FencingTokenAnnotation holds the fencing token of the term that wrote
	// the object: a write of an older term never replaces it.
	FencingTokenAnnotation = "leader-elector.io/fencing-token"
	// HolderAnnotation names the pod whose term wrote the object.
	HolderAnnotation = "leader-elector.io/holder"
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the
	// slices the leader writes; the EndpointSlice controller leaves them be.
	ManagedBy = "leader-elector"
)

// shutdownTimeout bounds the write that withdraws this pod on shutdown.
const shutdownTimeout = 2 * time.Second

// Leadership is what the router reads of the election.
type Leadership interface {
	// Watch returns the current state and a channel closed at its next
	// change.
	Watch() (leadership.State, <-chan struct{})
	// Snapshot returns the state at this moment; IsLeader is time-bounded.
	Snapshot() leadership.State
}

// Config configures a Router.
type Config struct {
	Mode Mode
	// Namespace holds the Service and its EndpointSlice, or the pods.
	Namespace string
	// PodName is this pod's name, which is also its holder identity.
	PodName string
	// LeaseName is the Lease the pods elect on; label mode labels the pods
	// with it. A routing object's token above every one this process has
	// seen is judged by this Lease's (get, which the election's RBAC
	// grants).
	LeaseName string
	// Service is the Service without a selector (endpointslice mode).
	Service string
	// PodIP is the endpoint published for this pod (endpointslice mode).
	PodIP string
	// LeaderLabel is the label set to "true" on the leader's pod and
	// "false" on the others (label mode).
	LeaderLabel string
	// Client sends the routing requests. Give it a request timeout (as the
	// Lease client has): each write is also bounded by the end of this pod's
	// claim.
	Client     kubernetes.Interface
	Leadership Leadership
	// Resync is how often the leader checks that the routing still names
	// it, and repairs it (another writer, a late write of an old leader).
	Resync time.Duration
	// MaxBackoff is the longest wait before retrying a failed write; the
	// retry period suits, so that routing recovers as fast as the Lease.
	MaxBackoff time.Duration
}

// publisher is one routing mode.
type publisher interface {
	// publish routes traffic to this pod for the term of s, which leads.
	publish(ctx context.Context, s leadership.State) error
	// withdraw stops routing traffic to this pod, if it still does; it
	// never touches what another pod's term has written.
	withdraw(ctx context.Context) error
}

// errStale is returned when a write was refused because this pod does not,
// or no longer, lead the term it would publish.
var errStale = errors.New("refused a stale routing write")

// errWithdrawnUnderTerm is returned when this pod, leading a term, finds
// its routing taken away under that term's own token, and the API server
// refuses to publish it again under that token: the admission policies
// allow a change of routing only with a change of token. This pod's own
// withdrawal never precedes a publication in the same term (a claim taken
// back is a new term), so another writer did it; only a new term can
// publish again, and the router ends this one (termEnder).
var errWithdrawnUnderTerm = errors.New("routing was taken away under this term's fencing token, and the API server refuses to publish it again under the same token")

// termEnder is a Leadership that can end one of its terms: the elector's
// ReleaseTerm (release the Lease, then sit out a lease duration, so that
// the next term, this pod's or another's, has a larger token).
type termEnder interface {
	ReleaseTerm(ctx context.Context, token int64) (leadership.State, error)
}

// Router keeps the routing in step with the election.
type Router struct {
	cfg     Config
	pub     publisher
	metrics *Metrics
}

// New returns a Router for cfg, or nil for ModeNone.
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	mode := modes[cfg.mode()]
	if mode.publisher == nil {
		return nil, nil
	}
	if cfg.LeaseName == "" {
		return nil, errors.New("routing needs the name of the Lease, whose fencing tokens it writes")
	}
	m := newMetrics(cfg.Mode)
	return &Router{cfg: cfg, metrics: m, pub: mode.publisher(cfg, newFence(cfg.Leadership, m, leaseToken(cfg)), m)}, nil
}

// leaseToken reads the fencing token the Lease carries now: a quorum read
// (no resourceVersion), so that it sees any term whose routing write this
// pod has read. A missing Lease carries none.
func leaseToken(cfg Config) func(context.Context) (int64, error) {
	return func(ctx context.Context) (int64, error) {
		l, err := cfg.Client.CoordinationV1().Leases(cfg.Namespace).Get(ctx, cfg.LeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return 0, nil
		}
		if err != nil {
			return 0, fmt.Errorf("get lease %s/%s: %w", cfg.Namespace, cfg.LeaseName, err)
		}
		return int64(ptr.Deref(l.Spec.LeaseTransitions, 0)), nil
	}
}

// Metrics returns the router's Prometheus collectors.
func (r *Router) Metrics() *Metrics { return r.metrics }

// Run publishes this pod while it leads and withdraws it when it stops,
// on every change of the election state, retrying failed writes with
// backoff, until ctx ends. Then it withdraws this pod, so that traffic
// stops reaching a pod that is shutting down even before a new leader
// takes over.
func (r *Router) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("route", r.cfg.Mode)
	ctx = klog.NewContext(ctx, logger)
	backoff := newBackoff(r.cfg.MaxBackoff)
	// A previous incarnation of this pod may have left itself published.
	mayBePublished := true
	s, changed := r.cfg.Leadership.Watch()
	for {
		var err error
		switch {
		case s.IsLeader:
			mayBePublished = true
			err = r.pub.publish(ctx, s)
		case mayBePublished:
			if err = r.pub.withdraw(ctx); err == nil {
				mayBePublished = false
			}
		}

		var retry <-chan time.Time
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, errStale):
			// The election state is about to change (the claim lapsed, or
			// a newer term exists that this pod has not seen yet).
			retry = time.After(r.cfg.Resync)
		case errors.Is(err, errWithdrawnUnderTerm):
			r.metrics.errors.Inc()
			r.endTerm(ctx, s.FencingToken, err)
			retry = time.After(r.cfg.Resync)
		case err != nil:
			r.metrics.errors.Inc()
			d := backoff.Step()
			logger.Error(err, "Routing write failed; retrying", "retryIn", d.Round(time.Millisecond))
			retry = time.After(d)
		default:
			backoff = newBackoff(r.cfg.MaxBackoff)
			if s.IsLeader {
				retry = time.After(r.cfg.Resync)
			}
		}
		select {
		case <-ctx.Done():
			if mayBePublished {
				r.withdrawOnShutdown(ctx)
			}
			return
		case <-changed:
		case <-retry:
		}
		s, changed = r.cfg.Leadership.Watch()
	}
}

// endTerm ends term token, whose routing was taken away under its token
// (errWithdrawnUnderTerm): without it the Service would have no leader
// until the term ended by itself, which a leader that keeps renewing never
// does.
func (r *Router) endTerm(ctx context.Context, token int64, cause error) {
	logger := klog.FromContext(ctx)
	ender, ok := r.cfg.Leadership.(termEnder)
	if !ok {
		logger.Error(cause, "Routing write refused; retrying", "fencingToken", token)
		return
	}
	logger.Error(cause, "Ending this term so that a new one, with a larger fencing token, can publish the routing", "fencingToken", token)
	if _, err := ender.ReleaseTerm(ctx, token); err != nil {
		logger.Error(err, "Could not end the term whose routing was taken away", "fencingToken", token)
	}
}

func (r *Router) withdrawOnShutdown(ctx context.Context) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := r.pub.withdraw(wctx); err != nil {
		klog.FromContext(ctx).Error(err, "Failed to withdraw this pod from routing on shutdown; the next leader replaces it")
	}
}

// newBackoff retries a failed write after 100 ms, doubling up to limit.
func newBackoff(limit time.Duration) *wait.Backoff {
	return &wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 64, Cap: max(limit, 100*time.Millisecond)}
}
