package election

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// deleteReleased deletes the Lease if it names no holder. The delete is
// conditional on the UID and resourceVersion that were read, so a Lease that
// anyone has written since (a new incarnation of this pod taking it again)
// is left alone.
func (e *Elector) deleteReleased(ctx context.Context) error {
	leases := e.cache.Leases(e.cfg.Namespace)
	lease, err := leases.Get(ctx, e.cfg.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		return nil
	}
	err = e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Delete(ctx, e.cfg.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion},
	})
	switch {
	case err == nil:
		klog.FromContext(ctx).V(2).Info("Deleted released lease")
		return nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("delete lease %s/%s: %w", e.cfg.Namespace, e.cfg.Name, err)
	}
}
