// Package leaseevents records Kubernetes Events about a Lease: the
// "became leader" and "stopped leading" of client-go's elector, written
// by a recorder that can be flushed on shutdown.
package leaseevents

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Component is the source and reporting controller of the Events this
// sidecar records.
const Component = "leader-elector"

const (
	// eventQueueLength bounds the Events waiting to be written. Leadership
	// changes at most once per retry period, so a full queue means the API
	// server has not answered for a long while; further Events are dropped
	// rather than held in memory.
	eventQueueLength = 32
	// eventWriteTimeout bounds one attempt to write an Event.
	eventWriteTimeout = 5 * time.Second
	// eventAttempts is how often an Event is tried while the API server
	// cannot be reached; a refusal (forbidden, invalid) is not retried.
	eventAttempts = 3
	// eventRetryWait separates the attempts.
	eventRetryWait = time.Second
)

// Recorder records Kubernetes Events (core/v1, as `kubectl describe`
// shows them) about the Lease: client-go's "became leader" and "stopped
// leading", reason LeaderElection, as kube-controller-manager records them,
// with the term's fencing token added. Set it as election.Config.Events.
//
// It is client-go's record.EventRecorder cut down to what a sidecar needs,
// for one reason: Close waits until the queued Events are written. client-go's
// broadcasters write in the background and cannot be flushed, so the
// "stopped leading" of a graceful shutdown, recorded as the process is about
// to exit, could be lost with it. Recording never blocks the election: Events are queued, and
// dropped (with a log line) when the queue is full or the recorder closed.
type Recorder struct {
	client   kubernetes.Interface
	source   corev1.EventSource
	instance string
	clock    clock.Clock
	logger   klog.Logger
	// retryWait separates the attempts at one Event.
	retryWait time.Duration
	// written is closed when the writer has written (or given up on)
	// every queued Event after Close.
	written chan struct{}
	// refused is set once the API server refused an Event as forbidden, so
	// that the missing permission is reported once, not per Event. Only the
	// writer goroutine uses it.
	refused bool

	// mu guards closed and sending on queue, so that nothing is sent after
	// Close has closed it.
	mu     sync.Mutex
	closed bool
	queue  chan *corev1.Event
}

// New starts a recorder that writes Events with client,
// reported by instance (this pod's identity). Close it when the elector
// has stopped.
func New(ctx context.Context, client kubernetes.Interface, instance string) *Recorder {
	r := &Recorder{
		client:    client,
		source:    corev1.EventSource{Component: Component},
		instance:  instance,
		clock:     clock.RealClock{},
		logger:    klog.FromContext(ctx).WithName("events"),
		retryWait: eventRetryWait,
		queue:     make(chan *corev1.Event, eventQueueLength),
		written:   make(chan struct{}),
	}
	go r.write()
	return r
}

// Eventf queues an Event about obj (client-go's resourcelock.EventRecorder).
func (r *Recorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...interface{}) {
	ref, err := reference.GetReference(scheme.Scheme, obj)
	if err != nil {
		r.logger.Error(err, "Cannot record an Event: no reference to its object", "reason", reason)
		return
	}
	now := r.clock.Now()
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			// The form client-go's recorder uses: unique per object and moment.
			Name:      fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()),
			Namespace: ref.Namespace,
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             fmt.Sprintf(message, args...),
		Type:                eventType,
		Source:              r.source,
		FirstTimestamp:      metav1.NewTime(now),
		LastTimestamp:       metav1.NewTime(now),
		Count:               1,
		ReportingController: Component,
		ReportingInstance:   r.instance,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		r.logger.Info("Not recording an Event: the recorder is closed", "reason", reason, "message", event.Message)
		return
	}
	select {
	case r.queue <- event:
	default:
		r.logger.Info("Dropping an Event: too many are waiting for the API server", "reason", reason, "message", event.Message)
	}
}

// Close stops taking Events and waits until those queued are written or
// ctx ends.
func (r *Recorder) Close(ctx context.Context) error {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.queue)
	}
	r.mu.Unlock()
	select {
	case <-r.written:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("events not all written: %w", context.Cause(ctx))
	}
}

// write writes the queued Events, one at a time, until Close.
func (r *Recorder) write() {
	defer close(r.written)
	for event := range r.queue {
		r.writeOne(event)
	}
}

func (r *Recorder) writeOne(event *corev1.Event) {
	var err error
	for attempt := range eventAttempts {
		if attempt > 0 {
			r.clock.Sleep(r.retryWait)
		}
		ctx, cancel := context.WithTimeout(context.Background(), eventWriteTimeout)
		_, err = r.client.CoreV1().Events(event.Namespace).Create(ctx, event, metav1.CreateOptions{})
		cancel()
		switch {
		case err == nil:
			return
		case apierrors.IsForbidden(err):
			if !r.refused {
				r.refused = true
				r.logger.Error(err, "Cannot record Events: grant `create` on events in the Lease's namespace, or turn them off with --events=false")
			} else {
				r.logger.V(2).Info("Event not recorded: forbidden", "reason", event.Reason, "message", event.Message)
			}
			return
		case apierrors.IsAlreadyExists(err):
			// An earlier attempt was applied, its answer lost.
			return
		case isRefusal(err):
			// Refused for what it is: trying again would not help.
			r.logger.Error(err, "The API server refused an Event", "reason", event.Reason, "message", event.Message)
			return
		}
	}
	r.logger.Error(err, "Could not record an Event", "reason", event.Reason, "message", event.Message, "attempts", eventAttempts)
}

// isRefusal reports whether the API server answered err about the Event
// itself, rather than being unreachable or overloaded.
func isRefusal(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	transient := apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err)
	return !transient
}
