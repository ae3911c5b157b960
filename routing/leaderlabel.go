package routing

import (
	"context"
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// controllerLabels are the unprefixed label keys that Kubernetes controllers
// set on the pods they own (and select them by). Written out because
// k8s.io/api has constants for some of them only, and apimachinery's
// validation knows none.
var controllerLabels = map[string]string{
	appsv1.DefaultDeploymentUniqueLabelKey: "the Deployment controller",
	appsv1.ControllerRevisionHashLabelKey:  "the StatefulSet and DaemonSet controllers",
	"pod-template-generation":              "the DaemonSet controller",
	"controller-uid":                       "the Job controller",
	"job-name":                             "the Job controller",
}

// reservedPrefixes are the label prefixes Kubernetes reserves for itself,
// with their subdomains (statefulset.kubernetes.io/, apps.kubernetes.io/…).
var reservedPrefixes = []string{"kubernetes.io", "k8s.io"}

// ReservedLabel says why key cannot be the leader label, or "" if it can:
// a label Kubernetes controllers set on their pods, or one under a prefix
// Kubernetes reserves. Label mode rewrites the leader label on every pod of
// the group, so such a key would take each pod from its controller, which
// would then create another, without end.
func ReservedLabel(key string) string {
	if who, ok := controllerLabels[key]; ok {
		return "a label " + who + " sets on its pods"
	}
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return ""
	}
	for _, reserved := range reservedPrefixes {
		if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
			return "its prefix " + prefix + "/ is reserved for Kubernetes"
		}
	}
	return ""
}

// ErrLeaderLabelTaken is wrapped by CheckLeaderLabel's refusals.
var ErrLeaderLabelTaken = errors.New("the leader label belongs to something else")

// CheckLeaderLabel refuses, with an error wrapping ErrLeaderLabelTaken, a
// leader label that this pod already carries with a value label mode never
// writes (something else owns it: the pod template, another tool), or that
// the controller owning the pod selects its pods by: rewriting it would
// orphan the pod, and the controller would create another, without end.
//
// It reads the pod (label mode's Role grants get on pods) and then, if it
// may, the owning ReplicaSet, StatefulSet, DaemonSet, Job or
// ReplicationController. The shipped Role does not grant that: a refused
// read is logged at -v=2 and skipped. Since a selector's keys are in the
// pod template's labels, the pod's own labels already catch most such
// keys. Any other error means the check could not be made.
func CheckLeaderLabel(ctx context.Context, client kubernetes.Interface, namespace, podName, label string) error {
	pod, err := client.CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get pod %s/%s: %w", namespace, podName, err)
	}
	if v, ok := pod.Labels[label]; ok && v != "true" && v != "false" {
		return fmt.Errorf("%w: pod %s/%s carries %s=%q, which label mode did not write (it writes \"true\" or \"false\"); choose another --leader-label", ErrLeaderLabelTaken, namespace, podName, label, v)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return nil
	}
	selector, err := controllerSelector(ctx, client, namespace, ref)
	switch {
	case apierrors.IsForbidden(err):
		klog.FromContext(ctx).V(2).Info("Not checking the leader label against the pod's controller: the ServiceAccount may not read it", "controller", klog.KRef(namespace, ref.Name), "kind", ref.Kind)
		return nil
	case err != nil:
		return err
	case selector == nil:
		return nil
	}
	requirements, _ := selector.Requirements()
	for _, r := range requirements {
		if r.Key() == label {
			return fmt.Errorf("%w: %s %s/%s selects its pods by %s (selector %q); relabelling the pod would take it from its controller, which would create another; choose another --leader-label", ErrLeaderLabelTaken, ref.Kind, namespace, ref.Name, label, selector)
		}
	}
	return nil
}

// controllerSelector reads the pod selector of the controller ref names, or
// returns nil for a kind it does not know (a custom controller's).
func controllerSelector(ctx context.Context, client kubernetes.Interface, namespace string, ref *metav1.OwnerReference) (labels.Selector, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil
	}
	get := metav1.GetOptions{}
	var sel *metav1.LabelSelector
	switch gv.WithKind(ref.Kind).GroupKind() {
	case schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}:
		o, err := client.AppsV1().ReplicaSets(namespace).Get(ctx, ref.Name, get)
		if err != nil {
			return nil, fmt.Errorf("get replicaset %s/%s: %w", namespace, ref.Name, err)
		}
		sel = o.Spec.Selector
	case schema.GroupKind{Group: "apps", Kind: "StatefulSet"}:
		o, err := client.AppsV1().StatefulSets(namespace).Get(ctx, ref.Name, get)
		if err != nil {
			return nil, fmt.Errorf("get statefulset %s/%s: %w", namespace, ref.Name, err)
		}
		sel = o.Spec.Selector
	case schema.GroupKind{Group: "apps", Kind: "DaemonSet"}:
		o, err := client.AppsV1().DaemonSets(namespace).Get(ctx, ref.Name, get)
		if err != nil {
			return nil, fmt.Errorf("get daemonset %s/%s: %w", namespace, ref.Name, err)
		}
		sel = o.Spec.Selector
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		o, err := client.BatchV1().Jobs(namespace).Get(ctx, ref.Name, get)
		if err != nil {
			return nil, fmt.Errorf("get job %s/%s: %w", namespace, ref.Name, err)
		}
		sel = o.Spec.Selector
	case schema.GroupKind{Kind: "ReplicationController"}:
		o, err := client.CoreV1().ReplicationControllers(namespace).Get(ctx, ref.Name, get)
		if err != nil {
			return nil, fmt.Errorf("get replicationcontroller %s/%s: %w", namespace, ref.Name, err)
		}
		return labels.SelectorFromSet(o.Spec.Selector), nil
	default:
		return nil, nil
	}
	if sel == nil {
		return nil, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return nil, fmt.Errorf("the selector of %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return selector, nil
}
