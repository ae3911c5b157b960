package proxy

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"golang.org/x/sync/singleflight"
)

// PodAddresses resolves a holder to its pod's status.podIP, read by name
// from the API server. The kubelet writes that field (pods/status); the
// sidecar's ServiceAccount cannot, so a stolen token cannot point the
// followers at an address of its choosing, as it could with an address it
// publishes on the Lease. A holder is accepted only if its pod runs as
// this pod's ServiceAccount (spec.serviceAccountName is immutable, and the
// token cannot create pods): naming another pod of the namespace in the
// Lease sends no one's traffic there.
type PodAddresses struct {
	Pods corev1client.PodInterface
	// Self is this pod's name (the identity).
	Self string

	mu sync.Mutex
	// serviceAccount is this pod's, read once.
	serviceAccount string
	// last is the last holder and term resolved, and its address: a pod's
	// IP is fixed for its life, and a new pod of the same name starts a new
	// term.
	last     route
	lastHost string
	// reads makes the connections that wait for one new leader share one
	// read of its pod: at a handover every waiting connection resolves the
	// same holder at once, and separate reads would queue behind the
	// routing client's rate limit.
	reads singleflight.Group
}

// resolveTimeout bounds one read of the holder's pod, shared by every
// connection waiting for it; each connection still waits no longer than
// its own --proxy-wait.
const resolveTimeout = 5 * time.Second

// Resolve returns the pod IP of holder, leading in the term token.
func (a *PodAddresses) Resolve(ctx context.Context, holder string, token int64) (string, error) {
	key := route{kind: routeRemote, holder: holder, token: token}
	a.mu.Lock()
	if a.last == key {
		defer a.mu.Unlock()
		return a.lastHost, nil
	}
	a.mu.Unlock()
	ch := a.reads.DoChan(fmt.Sprintf("%s/%d", holder, token), func() (any, error) {
		// Not the first caller's context: the others share the read.
		readCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resolveTimeout)
		defer cancel()
		return a.read(readCtx, key)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// read reads the holder's pod (and, the first time, this pod's
// ServiceAccount) and remembers its address.
func (a *PodAddresses) read(ctx context.Context, key route) (string, error) {
	holder := key.holder
	a.mu.Lock()
	sa := a.serviceAccount
	a.mu.Unlock()
	if sa == "" {
		self, err := a.Pods.Get(ctx, a.Self, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("read this pod %s: %w", a.Self, err)
		}
		sa = self.Spec.ServiceAccountName
	}
	pod, err := a.Pods.Get(ctx, holder, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("read the holder's pod: %w", err)
	}
	if pod.Spec.ServiceAccountName != sa {
		return "", fmt.Errorf("the holder's pod %s runs as ServiceAccount %q, not this pod's %q: not a candidate", holder, pod.Spec.ServiceAccountName, sa)
	}
	if net.ParseIP(pod.Status.PodIP) == nil {
		return "", fmt.Errorf("the holder's pod %s has no IP (yet)", holder)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.serviceAccount, a.last, a.lastHost = sa, key, pod.Status.PodIP
	return pod.Status.PodIP, nil
}
