package routing

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/leadership"
)

// maxAttempts bounds the re-reads after resourceVersion conflicts in one
// reconciliation; the router retries later if the object keeps changing.
const maxAttempts = 3

// SliceName is the name of the EndpointSlice the leader writes for
// service: the Service's own name, which the EndpointSlice controllers never
// use (they append a random suffix), and which lets RBAC name the Service
// and its slice with one resourceName.
func SliceName(service string) string { return service }

// ErrSliceMissing is returned when the Service's EndpointSlice does not
// exist. The sidecar never creates it: RBAC cannot limit create to one
// name, and a ServiceAccount that may create EndpointSlices may publish
// endpoints for any Service of the namespace. The chart and
// manifests/components/route-endpointslice ship it, as they ship the Lease.
var ErrSliceMissing = errors.New("the EndpointSlice does not exist; it is shipped with the chart and the route-endpointslice component, and the sidecar may not create it: apply them again")

// sliceWriter is endpointslice mode: the leader writes the one, shipped,
// EndpointSlice of the Service, holding only its own address and the
// Service's ports. A new leader replaces its endpoints in one write.
type sliceWriter struct {
	cfg     Config
	fence   fence
	metrics *Metrics
}

func (w *sliceWriter) publish(ctx context.Context, s leadership.State) error {
	logger := klog.FromContext(ctx)
	name := SliceName(w.cfg.Service)
	slices := w.cfg.Client.DiscoveryV1().EndpointSlices(w.cfg.Namespace)
	for range maxAttempts {
		svc, err := w.cfg.Client.CoreV1().Services(w.cfg.Namespace).Get(ctx, w.cfg.Service, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get service %s/%s: %w", w.cfg.Namespace, w.cfg.Service, err)
		}
		desired, err := w.desired(svc, s.FencingToken)
		if err != nil {
			return err
		}
		current, err := slices.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("endpointslice %s/%s: %w", w.cfg.Namespace, name, ErrSliceMissing)
		}
		if err != nil {
			return fmt.Errorf("get endpointslice %s/%s: %w", w.cfg.Namespace, name, err)
		}
		if err := w.fence.newer(ctx, current, s.FencingToken); err != nil {
			return err
		}
		if current.AddressType != desired.AddressType {
			// Immutable: the shipped slice says which family it holds.
			return fmt.Errorf("endpointslice %s/%s holds %s addresses and this pod's IP %s is %s: ship the slice with addressType %s", w.cfg.Namespace, name, current.AddressType, w.cfg.PodIP, desired.AddressType, desired.AddressType)
		}
		if sameSlice(current, desired) {
			return nil
		}

		wctx, cancel, err := w.fence.window(ctx, s.FencingToken)
		if err != nil {
			return err
		}
		_, err = slices.Update(wctx, withContent(current, desired), metav1.UpdateOptions{})
		cancel()
		if apierrors.IsConflict(err) {
			w.metrics.conflicts.Inc()
			continue
		}
		if withdrawnUnderTerm(err, current.Annotations, s.FencingToken) && !equality.Semantic.DeepEqual(current.Endpoints, desired.Endpoints) {
			return fmt.Errorf("%w: write endpointslice %s/%s: %w", errWithdrawnUnderTerm, w.cfg.Namespace, name, err)
		}
		if err != nil {
			return fmt.Errorf("write endpointslice %s/%s: %w", w.cfg.Namespace, name, err)
		}
		w.metrics.writes.Inc()
		logger.Info("Published this pod as the Service's only endpoint", "endpointSlice", klog.KRef(w.cfg.Namespace, name), "address", w.cfg.PodIP, "fencingToken", s.FencingToken)
		return nil
	}
	return fmt.Errorf("write endpointslice %s/%s: it kept changing under us", w.cfg.Namespace, name)
}

// withdraw empties the slice if it still lists this pod. The fencing token
// stays, so an older term still cannot write, and the update is conditional
// on the version read, so a newer term's slice is never emptied.
func (w *sliceWriter) withdraw(ctx context.Context) error {
	name := SliceName(w.cfg.Service)
	slices := w.cfg.Client.DiscoveryV1().EndpointSlices(w.cfg.Namespace)
	for range maxAttempts {
		current, err := slices.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get endpointslice %s/%s: %w", w.cfg.Namespace, name, err)
		}
		if current.Annotations[HolderAnnotation] != w.cfg.PodName || len(current.Endpoints) == 0 {
			return nil
		}
		emptied := current.DeepCopy()
		emptied.Endpoints = nil
		_, err = slices.Update(ctx, emptied, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			w.metrics.conflicts.Inc()
			continue
		}
		if err != nil {
			return fmt.Errorf("withdraw from endpointslice %s/%s: %w", w.cfg.Namespace, name, err)
		}
		w.metrics.writes.Inc()
		klog.FromContext(ctx).Info("Withdrew this pod from the Service's endpoints", "endpointSlice", klog.KRef(w.cfg.Namespace, name), "fencingToken", current.Annotations[FencingTokenAnnotation])
		return nil
	}
	return fmt.Errorf("withdraw from endpointslice %s/%s: it kept changing under us", w.cfg.Namespace, name)
}

// desired is the slice that routes the Service to this pod alone for the
// term token.
func (w *sliceWriter) desired(svc *corev1.Service, token int64) (*discoveryv1.EndpointSlice, error) {
	if len(svc.Spec.Selector) > 0 {
		return nil, fmt.Errorf("service %s/%s has a selector, so the EndpointSlice controller routes it to every selected pod; --route=endpointslice needs a Service without one", svc.Namespace, svc.Name)
	}
	ports, err := slicePorts(svc)
	if err != nil {
		return nil, err
	}
	addressType := discoveryv1.AddressTypeIPv4
	if ip := net.ParseIP(w.cfg.PodIP); ip != nil && ip.To4() == nil {
		addressType = discoveryv1.AddressTypeIPv6
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      SliceName(svc.Name),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   ManagedBy,
			},
			Annotations: map[string]string{
				FencingTokenAnnotation: formatToken(token),
				HolderAnnotation:       w.cfg.PodName,
			},
		},
		AddressType: addressType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{w.cfg.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: svc.Namespace, Name: w.cfg.PodName},
		}},
		Ports: ports,
	}, nil
}

// slicePorts maps the Service's ports to the slice's: same names and
// protocols, and the target port, which must be a number (a named target
// port would need the pod's spec to resolve).
func slicePorts(svc *corev1.Service) ([]discoveryv1.EndpointPort, error) {
	ports := make([]discoveryv1.EndpointPort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		target := p.TargetPort
		if target.Type == intstr.String {
			return nil, fmt.Errorf("service %s/%s port %q has the named targetPort %q; --route=endpointslice needs a number", svc.Namespace, svc.Name, p.Name, target.StrVal)
		}
		number := target.IntVal
		if number == 0 {
			number = p.Port
		}
		ports = append(ports, discoveryv1.EndpointPort{
			Name:        ptr.To(p.Name),
			Protocol:    ptr.To(p.Protocol),
			Port:        ptr.To(number),
			AppProtocol: p.AppProtocol,
		})
	}
	if len(ports) == 0 {
		return nil, fmt.Errorf("service %s/%s has no ports", svc.Namespace, svc.Name)
	}
	return ports, nil
}

// withContent is current, at the version read, with desired's endpoints,
// ports, labels and annotations. Whatever else current carries stays: the
// labels and annotations of whoever shipped the slice (Helm's release
// annotations, kubectl's last-applied configuration) and any owner.
func withContent(current, desired *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	updated := current.DeepCopy()
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	maps.Copy(updated.Labels, desired.Labels)
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	maps.Copy(updated.Annotations, desired.Annotations)
	updated.Endpoints = desired.Endpoints
	updated.Ports = desired.Ports
	return updated
}

// withdrawnUnderTerm reports whether err refuses (403) a publication over
// an object that already carries token, this term's own: what the
// admission policies answer when routing was taken away under the token.
func withdrawnUnderTerm(err error, annotations map[string]string, token int64) bool {
	return apierrors.IsForbidden(err) && annotations[FencingTokenAnnotation] == formatToken(token)
}

// sameSlice reports whether current already is what desired asks for.
func sameSlice(current, desired *discoveryv1.EndpointSlice) bool {
	for k, v := range desired.Labels {
		if current.Labels[k] != v {
			return false
		}
	}
	for k, v := range desired.Annotations {
		if current.Annotations[k] != v {
			return false
		}
	}
	return current.AddressType == desired.AddressType &&
		equality.Semantic.DeepEqual(current.Endpoints, desired.Endpoints) &&
		equality.Semantic.DeepEqual(current.Ports, desired.Ports)
}
