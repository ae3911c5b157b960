package routing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/leader-elector/leader-elector/leadership"
)

// labelWriter is label mode: every pod keeps the leader label on itself,
// "true" while it leads and "false" otherwise, with GroupLabel naming its
// Lease. The leader also sets "false" on any other pod of its Lease that
// still says "true": an old leader cut off from the API server cannot clear
// its own label.
//
// Fencing: a new leader writes its fencing token on every other pod of its
// Lease before it labels itself. That write changes each pod's
// resourceVersion, so a "true" patch an old leader had on its way — sent
// with the version it read before — fails its precondition. A pod labels
// itself "true" only once it carries GroupLabel, so that a new leader finds
// it.
type labelWriter struct {
	cfg     Config
	fence   fence
	metrics *Metrics
}

func (w *labelWriter) publish(ctx context.Context, s leadership.State) error {
	pods := w.cfg.Client.CoreV1().Pods(w.cfg.Namespace)
	for range maxAttempts {
		// Others first, so that a Service selecting on the label never
		// lists two pods because of this write.
		conflict, err := w.fenceOthers(ctx, s.FencingToken)
		if err != nil {
			return err
		}
		if conflict {
			continue
		}
		pod, err := pods.Get(ctx, w.cfg.PodName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", w.cfg.Namespace, w.cfg.PodName, err)
		}
		if pod.Labels[GroupLabel] != w.cfg.LeaseName {
			// Join the group first (as a follower), so that the next
			// leader fences this pod; then read it again.
			if err := w.patch(ctx, pod, "false", nil); err != nil && !apierrors.IsConflict(err) {
				return err
			}
			continue
		}
		token := formatToken(s.FencingToken)
		if w.labelled(pod, "true") && pod.Annotations[FencingTokenAnnotation] == token {
			return nil
		}
		// A newer leader has fenced this pod already: this pod's view of
		// the election is behind, and labelling itself would route to it.
		if err := w.fence.newer(ctx, pod, s.FencingToken); err != nil {
			return err
		}
		wctx, cancel, err := w.fence.window(ctx, s.FencingToken)
		if err != nil {
			return err
		}
		err = w.patch(wctx, pod, "true", map[string]string{FencingTokenAnnotation: token})
		cancel()
		if apierrors.IsConflict(err) {
			w.metrics.conflicts.Inc()
			continue
		}
		if withdrawnUnderTerm(err, pod.Annotations, s.FencingToken) && pod.Labels[w.cfg.LeaderLabel] != "true" {
			return fmt.Errorf("%w: %w", errWithdrawnUnderTerm, err)
		}
		if err != nil {
			return err
		}
		klog.FromContext(ctx).Info("Labelled this pod as the leader", "pod", klog.KObj(pod), "label", w.cfg.LeaderLabel, "fencingToken", s.FencingToken)
		return nil
	}
	return fmt.Errorf("label pod %s/%s: the pods kept changing under us", w.cfg.Namespace, w.cfg.PodName)
}

// fenceOthers writes this term's fencing token on every other pod of this
// Lease that does not carry it yet, and sets their label to "false".
// conflict reports a pod that changed since it was listed.
func (w *labelWriter) fenceOthers(ctx context.Context, token int64) (conflict bool, err error) {
	selector := labels.SelectorFromSet(labels.Set{GroupLabel: w.cfg.LeaseName}).String()
	list, err := w.cfg.Client.CoreV1().Pods(w.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return false, fmt.Errorf("list pods %s in %s: %w", selector, w.cfg.Namespace, err)
	}
	mine := formatToken(token)
	for i := range list.Items {
		other := &list.Items[i]
		wasLeader := other.Labels[w.cfg.LeaderLabel] == "true"
		if other.Name == w.cfg.PodName || (!wasLeader && other.Annotations[FencingTokenAnnotation] == mine) {
			continue
		}
		if err := w.fence.newer(ctx, other, token); err != nil {
			return false, err
		}
		wctx, cancel, err := w.fence.window(ctx, token)
		if err != nil {
			return false, err
		}
		err = w.patch(wctx, other, "false", map[string]string{FencingTokenAnnotation: mine})
		cancel()
		if apierrors.IsConflict(err) {
			w.metrics.conflicts.Inc()
			return true, nil
		}
		if errors.Is(err, ErrLeaderLabelTaken) {
			// Not "true", so no Service routes to it for label mode; its
			// own sidecar refuses to run with this label.
			klog.FromContext(ctx).Info("Left a pod alone: its leader label is not label mode's", "pod", klog.KObj(other), "err", err)
			continue
		}
		if err != nil {
			return false, err
		}
		if wasLeader {
			klog.FromContext(ctx).Info("Cleared the leader label of an old leader", "pod", klog.KObj(other), "theirToken", other.Annotations[FencingTokenAnnotation], "fencingToken", token)
		}
	}
	return false, nil
}

// withdraw sets this pod's label to "false", if it is not already.
func (w *labelWriter) withdraw(ctx context.Context) error {
	pods := w.cfg.Client.CoreV1().Pods(w.cfg.Namespace)
	for range maxAttempts {
		pod, err := pods.Get(ctx, w.cfg.PodName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get pod %s/%s: %w", w.cfg.Namespace, w.cfg.PodName, err)
		}
		if w.labelled(pod, "false") {
			return nil
		}
		wasLeader := pod.Labels[w.cfg.LeaderLabel] == "true"
		err = w.patch(ctx, pod, "false", nil)
		if apierrors.IsConflict(err) {
			w.metrics.conflicts.Inc()
			continue
		}
		if err != nil {
			return err
		}
		if wasLeader {
			klog.FromContext(ctx).Info("Cleared this pod's leader label", "pod", klog.KObj(pod), "label", w.cfg.LeaderLabel)
		}
		return nil
	}
	return fmt.Errorf("label pod %s/%s: it kept changing under us", w.cfg.Namespace, w.cfg.PodName)
}

// labelled reports whether pod carries the leader label with value and the
// group label of this Lease.
func (w *labelWriter) labelled(pod *corev1.Pod, value string) bool {
	return pod.Labels[w.cfg.LeaderLabel] == value && pod.Labels[GroupLabel] == w.cfg.LeaseName
}

// patch sets the labels (and annotations) of pod, conditional on the
// resourceVersion it was read at.
func (w *labelWriter) patch(ctx context.Context, pod *corev1.Pod, value string, annotations map[string]string) error {
	// Never overwrite a value label mode did not write: the label is
	// someone else's (CheckLeaderLabel refuses it at startup, but may not
	// have been able to read the pod then).
	if v, ok := pod.Labels[w.cfg.LeaderLabel]; ok && v != "true" && v != "false" {
		return fmt.Errorf("%w: pod %s/%s carries %s=%q, which label mode did not write", ErrLeaderLabelTaken, pod.Namespace, pod.Name, w.cfg.LeaderLabel, v)
	}
	meta := map[string]any{
		"resourceVersion": pod.ResourceVersion,
		"labels":          map[string]string{w.cfg.LeaderLabel: value, GroupLabel: w.cfg.LeaseName},
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = w.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	if err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("label pod %s/%s %s=%s: %w", pod.Namespace, pod.Name, w.cfg.LeaderLabel, value, err)
	}
	if err == nil {
		w.metrics.writes.Inc()
	}
	return err
}
