package health

import (
	"context"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// podCheckTimeout bounds the read of this pod before a new term: the check
// is for rollouts, not for safety, so a slow API server must not hold up a
// takeover for long.
const podCheckTimeout = time.Second

// What ownPod knows of this pod.
const (
	podUnknown     int32 = iota // read it before each new term
	podTerminating              // deleted: never take the Lease again
	podUnchecked                // not a pod, or not readable: never read again
)

// ownPod tells whether this candidate's pod is terminating, from its
// metadata.deletionTimestamp. A pod learns of its deletion from its
// SIGTERM, and a native sidecar gets that only once the app has exited:
// in a rollout that deletes every old pod at once, an old pod would take
// the Lease the old leader released and lead until its app exits, a
// second move. So with Config.CheckPod the candidate reads its own pod
// before a new term (one GET, by name: the identity in the Lease's
// namespace, as the routing modes read it). It needs get on pods; without
// it, or outside a pod, the check is off for good after one try, and the
// candidate takes the Lease as before.
type ownPod struct {
	client          kubernetes.Interface
	namespace, name string
	state           atomic.Int32
}

// terminating reports whether the pod is known to be terminating, without
// reading it.
func (p *ownPod) terminating() bool { return p != nil && p.state.Load() == podTerminating }

// check reads the pod unless its state is settled, and reports whether it
// is terminating.
func (p *ownPod) check(ctx context.Context) bool {
	if p == nil || p.state.Load() != podUnknown {
		return p.terminating()
	}
	ctx, cancel := context.WithTimeout(ctx, podCheckTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	pod, err := p.client.CoreV1().Pods(p.namespace).Get(ctx, p.name, metav1.GetOptions{})
	switch {
	case err == nil && pod.DeletionTimestamp != nil:
		p.state.Store(podTerminating)
		logger.Info("This pod is terminating: it no longer takes the Lease", "pod", klog.KObj(pod))
	case err == nil:
	case apierrors.IsNotFound(err):
		p.state.Store(podUnchecked)
		logger.V(2).Info("No pod of this candidate's identity: a terminating pod cannot be told, not checked again", "pod", klog.KRef(p.namespace, p.name))
	case apierrors.IsForbidden(err):
		p.state.Store(podUnchecked)
		logger.Info("Cannot read this pod (needs get on pods): in a rollout that deletes every old pod at once, an old pod may take the Lease before a new one", "pod", klog.KRef(p.namespace, p.name), "err", err)
	default:
		// Unknown this time (a timeout, the API server away): take the
		// Lease as before; the next new term reads again.
		logger.V(2).Info("Could not read this pod; taking the Lease as if it were not terminating", "pod", klog.KRef(p.namespace, p.name), "err", err)
	}
	return p.terminating()
}
