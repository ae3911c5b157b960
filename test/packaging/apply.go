package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// FieldManager is the server-side apply field manager of the tests.
const FieldManager = "leader-elector-e2e"

// Apply applies objects with server-side apply and strict field validation
// (an unknown or duplicate field is an error, as with `kubectl apply
// --server-side`), Namespaces first.
func Apply(ctx context.Context, cfg *rest.Config, objs Objects) error {
	return apply(ctx, cfg, objs, nil)
}

// DryRunApply is Apply as a server-side dry run: the API server validates
// and admits the objects without storing them.
func DryRunApply(ctx context.Context, cfg *rest.Config, objs Objects) error {
	return apply(ctx, cfg, objs, []string{metav1.DryRunAll})
}

func apply(ctx context.Context, cfg *rest.Config, objs Objects, dryRun []string) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	ordered := slices.Clone(objs)
	slices.SortStableFunc(ordered, func(a, b *unstructured.Unstructured) int {
		return boolInt(b.GetKind() == "Namespace") - boolInt(a.GetKind() == "Namespace")
	})
	for _, u := range ordered {
		gvk := u.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
		}
		data, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if u.GetNamespace() != "" {
			ri = dyn.Resource(mapping.Resource).Namespace(u.GetNamespace())
		}
		force := true
		opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict", DryRun: dryRun}
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, data, opts); err != nil {
			return fmt.Errorf("server-side apply of %s/%s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InNamespace puts namespaced objects into namespace and renames Namespace
// objects to it, as `namespace:` in a kustomization does (RoleBinding
// subjects included). The routing modes' admission policies and bindings
// are cluster-scoped and name no namespace in what they do (their names
// carry the original one): they are left as they are.
func InNamespace(objs Objects, namespace string) error {
	for _, u := range objs {
		switch {
		case u.GetKind() == "Namespace":
			u.SetName(namespace)
			continue
		case u.GetKind() == "ValidatingAdmissionPolicy" || u.GetKind() == "ValidatingAdmissionPolicyBinding":
			continue
		case u.GetKind() == "ClusterRole" || u.GetKind() == "ClusterRoleBinding":
			return fmt.Errorf("%s/%s is cluster-scoped", u.GetKind(), u.GetName())
		}
		u.SetNamespace(namespace)
		if u.GetKind() == "RoleBinding" {
			subjects, _, err := unstructured.NestedSlice(u.Object, "subjects")
			if err != nil {
				return err
			}
			for _, s := range subjects {
				if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
					m["namespace"] = namespace
				}
			}
			if err := unstructured.SetNestedSlice(u.Object, subjects, "subjects"); err != nil {
				return err
			}
		}
	}
	return nil
}

// List lists the objects of a resource in namespace.
func List(ctx context.Context, cfg *rest.Config, group, version, resource, namespace string) ([]unstructured.Unstructured, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(schema.GroupVersionResource{Group: group, Version: version, Resource: resource}).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
