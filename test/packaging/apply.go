package packaging

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

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

// policyInNamespace rewrites an admission policy or binding written for
// one namespace (the middle part of its name) for another.
func policyInNamespace(u *unstructured.Unstructured, namespace string) error {
	rename := func(name string) (string, string, error) {
		parts := strings.SplitN(name, ".", 3)
		if len(parts) != 3 {
			return "", "", fmt.Errorf("%s/%s: not named <kind>.<namespace>.<Lease>", u.GetKind(), name)
		}
		old := parts[1]
		parts[1] = namespace
		return strings.Join(parts, "."), old, nil
	}
	name, old, err := rename(u.GetName())
	if err != nil {
		return err
	}
	u.SetName(name)
	if u.GetKind() == "ValidatingAdmissionPolicyBinding" {
		policy, _, _ := unstructured.NestedString(u.Object, "spec", "policyName")
		if policy, _, err = rename(policy); err != nil {
			return err
		}
		if err := unstructured.SetNestedField(u.Object, policy, "spec", "policyName"); err != nil {
			return err
		}
		const key = "kubernetes.io/metadata.name"
		if v, ok, _ := unstructured.NestedString(u.Object, "spec", "matchResources", "namespaceSelector", "matchLabels", key); !ok || v != old {
			return fmt.Errorf("%s/%s: its namespaceSelector selects %q, not its namespace %q", u.GetKind(), u.GetName(), v, old)
		}
		return unstructured.SetNestedField(u.Object, namespace, "spec", "matchResources", "namespaceSelector", "matchLabels", key)
	}
	conditions, _, err := unstructured.NestedSlice(u.Object, "spec", "matchConditions")
	if err != nil {
		return err
	}
	for _, c := range conditions {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		expr, _ := m["expression"].(string)
		quoted := "'system:serviceaccount:' + '" + old + "'"
		if !strings.Contains(expr, quoted) {
			return fmt.Errorf("%s/%s: match condition %q does not name namespace %q", u.GetKind(), u.GetName(), expr, old)
		}
		m["expression"] = strings.Replace(expr, quoted, "'system:serviceaccount:' + '"+namespace+"'", 1)
	}
	return unstructured.SetNestedSlice(u.Object, conditions, "spec", "matchConditions")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// InNamespace puts namespaced objects into namespace and renames Namespace
// objects to it, as `namespace:` in a kustomization does (RoleBinding
// subjects included). The admission policies and bindings are
// cluster-scoped but written for one namespace, as the components'
// replacements write them when the component is applied after
// `namespace:`: their names (<kind>.<namespace>.<Lease>), the
// ServiceAccount's username and the binding's namespace are rewritten to
// namespace.
func InNamespace(objs Objects, namespace string) error {
	for _, u := range objs {
		switch {
		case u.GetKind() == "Namespace":
			u.SetName(namespace)
			continue
		case u.GetKind() == "ValidatingAdmissionPolicy" || u.GetKind() == "ValidatingAdmissionPolicyBinding":
			if err := policyInNamespace(u, namespace); err != nil {
				return err
			}
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
