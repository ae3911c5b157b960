package cluster

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LeaseHolder is the holder the Lease namespace/name names, as the admin
// reads it; "" if it names none.
func (c *ControlPlane) LeaseHolder(ctx context.Context, namespace, name string) (string, error) {
	l, err := c.adminClient.CoordinationV1().Leases(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}
