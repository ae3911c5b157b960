package leasetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// recorder is a test that keeps the errors NewClient reports.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func lease(name, rv string) *coordinationv1.Lease {
	return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
}

func TestNewClientIsAnAPIServerOnLeases(t *testing.T) {
	ctx := context.Background()
	refused := errors.New("refused by the check")
	client := NewClient(t, Config{
		Verbs: []string{"get", "create", "update", "watch"},
		CheckUpdate: func(_, updated *coordinationv1.Lease) error {
			if ptr.Deref(updated.Spec.HolderIdentity, "") == "intruder" {
				return refused
			}
			return nil
		},
	}, lease("a", "1"))
	leases := client.CoordinationV1().Leases("ns")

	updated, err := leases.Update(ctx, lease("a", "1"), metav1.UpdateOptions{})
	if err != nil || updated.ResourceVersion != "2" {
		t.Fatalf("update on the current version: %v, resourceVersion %q; want it stored as version 2", err, updated.GetResourceVersion())
	}
	if _, err := leases.Update(ctx, lease("a", "1"), metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("update on an old version: %v, want a conflict", err)
	}
	intruder := lease("a", "2")
	intruder.Spec.HolderIdentity = ptr.To("intruder")
	if _, err := leases.Update(ctx, intruder, metav1.UpdateOptions{}); !errors.Is(err, refused) {
		t.Errorf("update refused by CheckUpdate: %v, want its error", err)
	}
	if got, err := leases.Get(ctx, "a", metav1.GetOptions{}); err != nil || got.ResourceVersion != "2" || got.Spec.HolderIdentity != nil {
		t.Errorf("after the refused update: %v, %+v; want version 2 unchanged", err, got)
	}
	if _, err := leases.Create(ctx, lease("a", ""), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Errorf("create of an existing Lease: %v, want AlreadyExists", err)
	}
	if created, err := leases.Create(ctx, lease("b", ""), metav1.CreateOptions{}); err != nil || created.ResourceVersion != "3" {
		t.Errorf("create: %v, resourceVersion %q; want version 3", err, created.GetResourceVersion())
	}
	if _, err := leases.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true)}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch-list: %v, want it refused (BadRequest)", err)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	w.Stop()
}

func TestNewClientFailsTheTestOnOtherRequests(t *testing.T) {
	ctx := context.Background()
	updateLease := func(c *fake.Clientset) error {
		_, err := c.CoordinationV1().Leases("ns").Update(ctx, lease("a", ""), metav1.UpdateOptions{})
		return err
	}
	getPod := func(c *fake.Clientset) error {
		_, err := c.CoreV1().Pods("ns").Get(ctx, "p", metav1.GetOptions{})
		return err
	}
	watchLeases := func(c *fake.Clientset) error {
		_, err := c.CoordinationV1().Leases("ns").Watch(ctx, metav1.ListOptions{})
		return err
	}
	serverVersion := func(c *fake.Clientset) error {
		_, err := c.Discovery().ServerVersion()
		return err
	}
	for _, tc := range []struct {
		name    string
		cfg     Config
		request func(*fake.Clientset) error
		allowed bool
	}{
		{name: "a verb not allowed", cfg: Config{Verbs: []string{"get"}}, request: updateLease},
		{name: "another resource", cfg: Config{Verbs: []string{"get"}}, request: getPod},
		{name: "a watch not allowed", cfg: Config{Verbs: []string{"get", "list"}}, request: watchLeases},
		{name: "the server version, not allowed", cfg: Config{Verbs: []string{"get"}}, request: serverVersion},
		{name: "the server version, allowed", cfg: Config{ServerVersion: true}, request: serverVersion, allowed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			err := tc.request(NewClient(r, tc.cfg))
			if tc.allowed {
				if err != nil || len(r.errors) > 0 {
					t.Errorf("allowed request: %v, test errors %q; want neither", err, r.errors)
				}
				return
			}
			if err == nil || len(r.errors) != 1 {
				t.Errorf("request: %v, test errors %q; want it refused and one test error", err, r.errors)
			}
		})
	}
}
