package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// shippedRBAC reads the ServiceAccount, Role, RoleBinding and Lease from the
// kustomize base users apply.
func shippedRBAC(t *testing.T) (*corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding, *coordinationv1.Lease) {
	t.Helper()
	dir := filepath.Join(repoRoot, "manifests", "base")
	var k struct {
		Resources []string `json:"resources"`
	}
	readYAML(t, filepath.Join(dir, "kustomization.yaml"), &k)
	var (
		sa      *corev1.ServiceAccount
		role    *rbacv1.Role
		binding *rbacv1.RoleBinding
		lease   *coordinationv1.Lease
	)
	for _, res := range k.Resources {
		path := filepath.Join(dir, res)
		var meta metav1.TypeMeta
		readYAML(t, path, &meta)
		switch meta.Kind {
		case "ServiceAccount":
			sa = &corev1.ServiceAccount{}
			readYAML(t, path, sa)
		case "Role":
			role = &rbacv1.Role{}
			readYAML(t, path, role)
		case "RoleBinding":
			binding = &rbacv1.RoleBinding{}
			readYAML(t, path, binding)
		case "Lease":
			lease = &coordinationv1.Lease{}
			readYAML(t, path, lease)
		default:
			t.Fatalf("%s: unexpected kind %q in the RBAC base", path, meta.Kind)
		}
	}
	if sa == nil || role == nil || binding == nil || lease == nil {
		t.Fatalf("manifests/base lacks a ServiceAccount, Role, RoleBinding or Lease")
	}
	return sa, role, binding, lease
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// applyRBAC creates the namespace and the shipped objects in it, with the
// Role's rules replaced by rules when rules is not nil, and without the
// shipped Lease when withoutLease. It returns a kubeconfig with the
// ServiceAccount's token and the shipped Lease's name.
func applyRBAC(t *testing.T, namespace string, rules []rbacv1.PolicyRule, withoutLease bool) (kubeconfig, lease string) {
	t.Helper()
	ctx := context.Background()
	cs := controlPlane.AdminClient()
	sa, role, binding, shippedLease := shippedRBAC(t)
	if rules != nil {
		role.Rules = rules
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kustomize fills in the subject's namespace; do the same.
	for i := range binding.Subjects {
		binding.Subjects[i].Namespace = namespace
	}
	if _, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !withoutLease {
		if _, err := cs.CoordinationV1().Leases(namespace).Create(ctx, shippedLease, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kubeconfig, err := controlPlane.ServiceAccountKubeconfig(ctx, namespace, sa.Name)
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig, shippedLease.Name
}

// TestShippedRBAC: candidates running with the ServiceAccount token bound
// only by the shipped Role, on the shipped Lease, elect a leader, hand over
// on SIGTERM (release is an update) — so the Role is enough — and that token
// can do nothing else, not even on another Lease — so it is no more than
// needed.
func TestShippedRBAC(t *testing.T) {
	const namespace = "rbac-shipped"
	kubeconfig, lease := applyRBAC(t, namespace, nil, false)
	g := newGroup(t, 2, candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
	leader := g.waitLeader(30 * time.Second)
	leader.signal(syscall.SIGTERM)
	if code, err := leader.waitExit(10 * time.Second); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	if !strings.Contains(leader.log(), "Released lease") {
		t.Errorf("leader did not release the Lease with the shipped RBAC")
	}
	g.waitLeader(leaseDuration+2*time.Second, leader)
	for _, c := range g.members() {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something with the shipped RBAC:\n%s", c.name, c.log())
		}
	}

	// What the token may do, asked of the API server's authorizer.
	allowed, sa := allowedAccess(t, kubeconfig, []string{namespace, "default"}, []groupResource{
		{"coordination.k8s.io", "leases"}, {"", "pods"}, {"", "secrets"}, {"", "configmaps"}, {"", "events"}, {"", "endpoints"}, {"discovery.k8s.io", "endpointslices"},
	}, []string{"", lease, "another-lease"})
	want := []access{
		{namespace, "coordination.k8s.io", "leases", lease, "get"},
		{namespace, "coordination.k8s.io", "leases", lease, "watch"},
		{namespace, "coordination.k8s.io", "leases", lease, "update"},
	}
	if !slices.Equal(allowed, want) {
		t.Errorf("the shipped RBAC allows %v, want exactly %v", allowed, want)
	}
	if _, err := sa.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing namespaces (cluster-scoped) with the sidecar's token: %v, want forbidden", err)
	}
}

// TestEveryShippedVerbIsNeeded: reading needs get or watch (watch makes
// idle candidates free, get is the fallback while the watch is not synced);
// a Role missing both, or update, leaves the candidate unable to lead, and
// so does a namespace without the shipped Lease (the Role may not create
// it). Each candidate reports the refusal and keeps running.
func TestEveryShippedVerbIsNeeded(t *testing.T) {
	_, role, _, _ := shippedRBAC(t)
	if len(role.Rules) != 1 {
		t.Fatalf("expected one rule in the shipped Role, got %d", len(role.Rules))
	}
	// Whether the candidate can still lead without the verb ("lease": with
	// the shipped Role but without the shipped Lease).
	leadsWithout := map[string]bool{"get": true, "watch": true, "get+watch": false, "update": false, "lease": false}
	for _, verb := range role.Rules[0].Verbs {
		if _, known := leadsWithout[verb]; !known {
			t.Fatalf("the shipped Role has verb %q that this test does not know", verb)
		}
	}
	for _, verb := range []string{"get", "watch", "get+watch", "update", "lease"} {
		leads := leadsWithout[verb]
		t.Run("without "+verb, func(t *testing.T) {
			namespace := "rbac-no-" + strings.ReplaceAll(verb, "+", "-")
			var rules []rbacv1.PolicyRule
			if verb != "lease" {
				rule := role.Rules[0]
				rule.Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return slices.Contains(strings.Split(verb, "+"), v) })
				rules = []rbacv1.PolicyRule{rule}
			}
			// The shipped Lease exists (without a holder) unless the case
			// is its absence, so taking it needs an update.
			kubeconfig, lease := applyRBAC(t, namespace, rules, verb == "lease")
			c := startCandidate(t, "crippled", candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
			if verb == "get" {
				// With the watch working, get is not even tried.
				g := &group{t: t, lease: lease, candidates: []*candidate{c}}
				g.waitLeader(10 * time.Second)
				return
			}
			err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				return strings.Contains(c.log(), "forbidden"), nil
			})
			if err != nil {
				t.Fatalf("no 'forbidden' in the log without %q:\n%s", verb, c.log())
			}
			if leads {
				g := &group{t: t, lease: lease, candidates: []*candidate{c}}
				g.waitLeader(10 * time.Second)
			} else {
				// A lease duration and then some: it never leads.
				deadline := time.Now().Add(leaseDuration + time.Second)
				for time.Now().Before(deadline) {
					s, err := c.state()
					if err != nil {
						t.Fatal(err)
					}
					if s.IsLeader {
						t.Fatalf("led without %q", verb)
					}
					time.Sleep(100 * time.Millisecond)
				}
				if code, body, _ := c.probe("/readyz"); code != 503 {
					t.Errorf("/readyz = %d %q, want 503", code, body)
				}
			}
			if !c.running() {
				t.Errorf("exited without %q", verb)
			}
		})
	}
}

type access struct {
	namespace, group, resource, name, verb string
}

type groupResource struct{ group, resource string }

// allowedAccess asks the API server's authorizer, as the kubeconfig's
// user, which requests of a matrix it may make: every verb on each
// resource in each namespace, with each name ("" for create and for a list
// of all). It also returns that user's client.
func allowedAccess(t *testing.T, kubeconfig string, namespaces []string, resources []groupResource, names []string) ([]access, kubernetes.Interface) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 500 // hundreds of access reviews, not a rate-limit test
	cs := kubernetes.NewForConfigOrDie(cfg)
	var allowed []access
	for _, ns := range namespaces {
		for _, res := range resources {
			for _, name := range names {
				for _, verb := range []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"} {
					review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authorizationv1.SelfSubjectAccessReview{
						Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
							Namespace: ns, Group: res.group, Resource: res.resource, Name: name, Verb: verb,
						}},
					}, metav1.CreateOptions{})
					if err != nil {
						t.Fatal(err)
					}
					if review.Status.Allowed {
						allowed = append(allowed, access{ns, res.group, res.resource, name, verb})
					}
				}
			}
		}
	}
	return allowed, cs
}
