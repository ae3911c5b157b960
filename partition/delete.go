package partition

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
)

// deleteTimeout bounds the deletion of the membership Lease on shutdown, as
// the release before it is bounded: a Lease left behind names no holder,
// and the others stop counting this pod a lease duration after its last
// renewal anyway.
const deleteTimeout = 2 * time.Second

// deleteMembership deletes this pod's membership Lease after its elector
// has released it on shutdown: the Lease is named after the pod and goes
// with it. Only a Lease that names no holder is deleted (a release that
// failed leaves it named), and the delete is conditional on the UID and
// resourceVersion that were read, so a Lease that anyone has written since
// (a new incarnation of this pod taking it again) is left alone. It needs
// the delete verb.
func (m *Member) deleteMembership(ctx context.Context) {
	name := MemberLease(m.cfg.Name, m.cfg.Identity)
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(m.cfg.Namespace, name))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), deleteTimeout)
	defer cancel()
	deleted, err := deleteReleased(ctx, m.cfg.Client.CoordinationV1().Leases(m.cfg.Namespace), name)
	switch {
	case err != nil:
		logger.Error(err, "Failed to delete the released lease on shutdown; it stays, with no holder")
	case deleted:
		logger.V(2).Info("Deleted released lease")
	}
}

// deleteReleased deletes the Lease name if it names no holder, and reports
// whether it did.
func deleteReleased(ctx context.Context, leases coordinationv1client.LeaseInterface, name string) (bool, error) {
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get lease %s: %w", name, err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "" {
		return false, nil
	}
	err = leases.Delete(ctx, name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &lease.UID, ResourceVersion: &lease.ResourceVersion},
	})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil
	default:
		return false, fmt.Errorf("delete lease %s: %w", name, err)
	}
}
