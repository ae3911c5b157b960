// Package leasetest is the fake API server of the Lease tests: client-go's
// fake clientset, made to behave like kube-apiserver where an elector
// depends on it, and strict about what the code under test may ask.
//
// The plain fake keeps an object's resourceVersion as the client sent it
// and takes any update; an elector relies on the API server's optimistic
// concurrency (a write based on an old version fails with a conflict) to
// never take a Lease over a newer write. It is for tests only: nothing in
// the sidecar imports it.
package leasetest

import (
	"fmt"
	"strconv"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

var (
	// Resource names Leases in the API server's errors.
	Resource = schema.GroupResource{Group: coordinationv1.GroupName, Resource: "leases"}
	// GVR names Leases in the fake's object tracker.
	GVR = coordinationv1.SchemeGroupVersion.WithResource("leases")
)

// Config says what the fake API server allows.
type Config struct {
	// Verbs are the requests allowed on Leases ("get", "list", "watch",
	// "create", "update", "delete"). Any other request, on a Lease or on
	// anything else, fails the test and is refused, like the catch-all
	// reactor of client-go's leaderelection_test.go.
	Verbs []string
	// ServerVersion also allows GET /version: an elector reads the API
	// server's clock from its answer's Date.
	ServerVersion bool
	// CheckUpdate, if set, sees every update that is based on the current
	// version of an existing Lease, before it is stored; an error it
	// returns is the answer, and the Lease stays as it was.
	CheckUpdate func(current, updated *coordinationv1.Lease) error
}

// NewClient returns a fake clientset holding objs that behaves like the API
// server on Leases: every create or update gets a new, higher
// resourceVersion; an update based on an older one fails with a conflict,
// and a create of an existing Lease with AlreadyExists. Watch-lists are
// refused (RefuseWatchLists).
func NewClient(t testing.TB, cfg Config, objs ...runtime.Object) *fake.Clientset {
	t.Helper()
	allowed := sets.New(cfg.Verbs...)
	c := fake.NewClientset(objs...)
	// The fake runs its reactors one request at a time, under its own lock.
	lastRV := 1
	c.PrependReactor("*", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		var lease *coordinationv1.Lease
		switch action.GetVerb() {
		case "create":
			lease = action.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			if _, err := c.Tracker().Get(GVR, lease.Namespace, lease.Name); err == nil {
				return true, nil, apierrors.NewAlreadyExists(Resource, lease.Name)
			}
		case "update":
			lease = action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
			obj, err := c.Tracker().Get(GVR, lease.Namespace, lease.Name)
			if err != nil {
				return true, nil, err
			}
			current := obj.(*coordinationv1.Lease)
			if lease.ResourceVersion != current.ResourceVersion {
				return true, nil, apierrors.NewConflict(Resource, lease.Name, fmt.Errorf("resourceVersion %q is not the current %q", lease.ResourceVersion, current.ResourceVersion))
			}
			if cfg.CheckUpdate != nil {
				if err := cfg.CheckUpdate(current, lease); err != nil {
					return true, nil, err
				}
			}
		default:
			return false, nil, nil
		}
		lastRV++
		lease.ResourceVersion = strconv.Itoa(lastRV)
		var err error
		if action.GetVerb() == "create" {
			err = c.Tracker().Create(GVR, lease, lease.Namespace)
		} else {
			err = c.Tracker().Update(GVR, lease, lease.Namespace)
		}
		if err != nil {
			return true, nil, err
		}
		return true, lease.DeepCopy(), nil
	})
	c.PrependReactor("*", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetResource().GroupResource() == Resource && allowed.Has(action.GetVerb()) {
			return false, nil, nil
		}
		if cfg.ServerVersion && action.GetVerb() == "get" && action.GetResource().Resource == "version" {
			return false, nil, nil
		}
		t.Errorf("unexpected action: %s %s", action.GetVerb(), action.GetResource())
		return true, nil, fmt.Errorf("unexpected action %s %s", action.GetVerb(), action.GetResource())
	})
	RefuseWatchLists(c)
	c.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if action.GetResource().GroupResource() == Resource && allowed.Has("watch") {
			return false, nil, nil
		}
		t.Errorf("unexpected watch: %s", action.GetResource())
		return true, nil, fmt.Errorf("unexpected watch %s", action.GetResource())
	})
	return c
}

// RefuseWatchLists makes c refuse every watch-list (a watch with
// sendInitialEvents): the fake cannot send its closing bookmark, so an
// informer would wait for it forever, never synced. Refused, the informer
// falls back to list and watch, as against an API server without streaming
// lists. It goes in front of the reactors c has.
func RefuseWatchLists(c *fake.Clientset) {
	c.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		if w, ok := action.(k8stesting.WatchActionImpl); ok && w.ListOptions.SendInitialEvents != nil {
			return true, nil, apierrors.NewBadRequest("no watch-list in the fake")
		}
		return false, nil, nil
	})
}
