//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/http"
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
	"k8s.io/apimachinery/pkg/fields"
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
// on SIGTERM (release is an update) and record the handover as Events on
// the Lease — so the Role is enough — and that token can do nothing else,
// not even on another Lease — so it is no more than needed.
func TestShippedRBAC(t *testing.T) {
	t.Parallel()
	const namespace = "rbac-shipped"
	kubeconfig, lease := applyRBAC(t, namespace, nil, false)
	g := newGroup(t, 2, candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
	leader := g.WaitLeader(giveUp)
	first, err := leader.state()
	if err != nil {
		t.Fatal(err)
	}
	leader.signal(syscall.SIGTERM)
	if code, err := leader.waitExit(giveUp); err != nil || code != 0 {
		t.Fatalf("leader exit %d, %v", code, err)
	}
	if !strings.Contains(leader.log(), "Released lease") {
		t.Errorf("leader did not release the Lease with the shipped RBAC")
	}
	// The old leader's Events were written before it exited: read once,
	// without waiting. (The new leader's may be there too.)
	want := []string{
		fmt.Sprintf("%s became leader (reason acquired, fencing token %d)", leader.name, first.FencingToken),
		fmt.Sprintf("%s stopped leading (reason shutdown, fencing token %d)", leader.name, first.FencingToken),
	}
	if got := leaseEvents(t, namespace, lease); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
		t.Errorf("Events on the Lease when the old leader had exited:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	next := g.WaitLeader(handoverBound, leader)
	want = append(want, fmt.Sprintf("%s became leader (reason acquired, fencing token %d)", next.name, first.FencingToken+1))
	var got []string
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		got = leaseEvents(t, namespace, lease)
		return len(got) >= len(want), nil
	}); err != nil || !slices.Equal(got, want) {
		t.Errorf("Events on the Lease after the handover:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	for _, c := range g.Members() {
		if strings.Contains(c.log(), "forbidden") {
			t.Errorf("%s was refused something with the shipped RBAC:\n%s", c.name, c.log())
		}
	}

	// What the token may do, asked of the API server's authorizer.
	allowed, sa := allowedAccess(t, kubeconfig, []string{namespace, "default"}, []groupResource{
		{"coordination.k8s.io", "leases"}, {"", "pods"}, {"", "secrets"}, {"", "configmaps"}, {"", "events"}, {"events.k8s.io", "events"}, {"", "endpoints"}, {"discovery.k8s.io", "endpointslices"},
	}, []string{"", lease, "another-lease"})
	wantAccess := []access{
		{namespace, "coordination.k8s.io", "leases", lease, "get"},
		{namespace, "coordination.k8s.io", "leases", lease, "list"},
		{namespace, "coordination.k8s.io", "leases", lease, "watch"},
		{namespace, "coordination.k8s.io", "leases", lease, "update"},
		// Event names are generated: create is allowed under any name.
		{namespace, "", "events", "", "create"},
		{namespace, "", "events", lease, "create"},
		{namespace, "", "events", "another-lease", "create"},
	}
	if !slices.Equal(allowed, wantAccess) {
		t.Errorf("the shipped RBAC allows %v, want exactly %v", allowed, wantAccess)
	}
	if _, err := sa.CoreV1().Namespaces().List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing namespaces (cluster-scoped) with the sidecar's token: %v, want forbidden", err)
	}
	checkListOnlyByName(t, sa, namespace, lease)
}

// checkListOnlyByName: the shipped `list` on the Lease (by resourceNames)
// reveals nothing `get` does not. The API server authorizes a list whose
// field selector requires metadata.name=<name> as a request for that name,
// so the Lease's own list is allowed; every other list of Leases — all of
// them, another name, by label, in another namespace — is refused.
func checkListOnlyByName(t *testing.T, sa kubernetes.Interface, namespace, lease string) {
	t.Helper()
	ctx := context.Background()
	byName := fields.OneTermEqualSelector("metadata.name", lease).String()
	list, err := sa.CoordinationV1().Leases(namespace).List(ctx, metav1.ListOptions{FieldSelector: byName})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != lease {
		t.Errorf("listing the Lease by name with the shipped RBAC: %v, %v; want it alone", list, err)
	}
	for _, refused := range []struct {
		namespace string
		opts      metav1.ListOptions
	}{
		{namespace, metav1.ListOptions{}},
		{namespace, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "another-lease").String()}},
		{namespace, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=leader-elector"}},
		{namespace, metav1.ListOptions{FieldSelector: "metadata.namespace=" + namespace}},
		{"default", metav1.ListOptions{FieldSelector: byName}},
	} {
		if _, err := sa.CoordinationV1().Leases(refused.namespace).List(ctx, refused.opts); !apierrors.IsForbidden(err) {
			t.Errorf("listing Leases in %s with %+v with the shipped RBAC: %v, want forbidden", refused.namespace, refused.opts, err)
		}
	}
}

// noStreamingLists is the environment of a sidecar whose reflectors start
// each watch with a list, as they must against an API server that does not
// serve streaming lists (its WatchList feature is off by default in 1.30,
// 1.31 and 1.33). client-go reads its feature gates from KUBE_FEATURE_*
// variables unless the binary replaces them (client-go/features), and the
// sidecar does not; against the pinned release, which streams, this is how
// the e2e suite makes the request an older release would need.
var noStreamingLists = []string{"KUBE_FEATURE_WatchListClient=false"}

// TestShippedRBACWithoutStreamingLists: with the shipped Role, candidates
// whose Lease watch starts with a list (the default against 1.30, 1.31 and
// 1.33) elect a leader and hand over on POST /release, and are refused
// nothing: the list of the Lease by name is allowed. Without `list` in the
// Role the same candidates are refused (TestEveryShippedVerbIsNeeded).
func TestShippedRBACWithoutStreamingLists(t *testing.T) {
	t.Parallel()
	const namespace = "rbac-listing"
	kubeconfig, lease := applyRBAC(t, namespace, nil, false)
	g := newGroup(t, 2, candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig, env: noStreamingLists})
	leader := g.WaitLeader(giveUp)
	leader.release(t)
	start := time.Now()
	next := g.WaitLeader(leaseDuration, leader)
	t.Logf("%s took the released Lease from %s after %v", next.name, leader.name, time.Since(start).Round(time.Millisecond))
	// A refused list shows as "forbidden" within a retry period of the
	// start (see the case "without list"); both have run for longer.
	for _, c := range g.Members() {
		if log := c.log(); strings.Contains(log, "forbidden") || strings.Contains(log, "Failed to watch") {
			t.Errorf("%s was refused something with the shipped RBAC and listing watches:\n%s", c.name, log)
		}
	}
}

// leaseEvents returns the messages of the Events about the Lease, in the
// order they were recorded, as `kubectl describe lease` finds them (by the
// Lease's kind, name and UID).
func leaseEvents(t *testing.T, namespace, lease string) []string {
	t.Helper()
	ctx := context.Background()
	cs := controlPlane.AdminClient()
	l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, lease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.kind": "Lease", "involvedObject.name": lease, "involvedObject.uid": string(l.UID),
	}.String()})
	if err != nil {
		t.Fatal(err)
	}
	events := list.Items
	// Timestamps are whole seconds; the names end in the recording time in
	// nanoseconds, in hexadecimal of a fixed width.
	slices.SortFunc(events, func(a, b corev1.Event) int { return strings.Compare(a.Name, b.Name) })
	var messages []string
	for _, e := range events {
		if e.Reason != "LeaderElection" || e.Type != corev1.EventTypeNormal || e.Source.Component != "leader-elector" {
			t.Errorf("Event %s: %s %s from %+v, want Normal LeaderElection from leader-elector", e.Name, e.Type, e.Reason, e.Source)
		}
		messages = append(messages, e.Message)
	}
	return messages
}

// TestEveryShippedVerbIsNeeded: reading needs get, watch or list (watch
// makes idle candidates free, get is the fallback while the watch is not
// synced, and the informer's list, by name, reads the Lease too); the watch
// needs list where the API server does not stream its initial list (1.30,
// 1.31, 1.33; here the candidate is made to list, see noStreamingLists),
// else it is refused and the candidate polls. A Role missing all three, or
// update, leaves the candidate unable to lead, and so does a namespace
// without the shipped Lease (the Role may not create it). Each candidate
// reports the refusal and keeps running.
func TestEveryShippedVerbIsNeeded(t *testing.T) {
	t.Parallel()
	_, role, _, _ := shippedRBAC(t)
	if len(role.Rules) != 2 || !slices.Equal(role.Rules[1].Resources, []string{"events"}) {
		t.Fatalf("expected the Lease's rule and the Events rule in the shipped Role, got %v", role.Rules)
	}
	leaseRule, eventsRule := role.Rules[0], role.Rules[1]
	// Whether the candidate can still lead without the verb ("lease": with
	// the shipped Role but without the shipped Lease).
	leadsWithout := map[string]bool{"get": true, "list": true, "watch": true, "get+watch": true, "get+list+watch": false, "update": false, "lease": false}
	for _, verb := range leaseRule.Verbs {
		if _, known := leadsWithout[verb]; !known {
			t.Fatalf("the shipped Role has verb %q that this test does not know", verb)
		}
	}
	if !slices.Equal(eventsRule.Verbs, []string{"create"}) {
		t.Fatalf("the shipped Role's Events rule has verbs %v that this test does not know", eventsRule.Verbs)
	}
	t.Run("without events", func(t *testing.T) {
		// Leads and hands over all the same, and says once what it lacks.
		const namespace = "rbac-no-events"
		kubeconfig, lease := applyRBAC(t, namespace, []rbacv1.PolicyRule{leaseRule}, false)
		c := startCandidate(t, "crippled", candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig})
		g := groupOf(t, lease, c)
		g.WaitLeader(giveUp)
		if status, _, body, err := c.do(http.MethodPost, "/release", nil); err != nil || status != http.StatusOK {
			t.Fatalf("POST /release: %d %s, %v", status, body, err)
		}
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			return strings.Contains(c.log(), "Released lease"), nil
		}); err != nil {
			t.Fatalf("no release without the Events rule:\n%s", c.log())
		}
		// The second Event ("stopped leading") is refused too, and said
		// only at -v=2.
		if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			return strings.Contains(c.log(), "Event not recorded: forbidden"), nil
		}); err != nil {
			t.Fatalf("the second Event was never refused:\n%s", c.log())
		}
		if n := strings.Count(c.log(), "Cannot record Events"); n != 1 {
			t.Errorf("said %d times that it cannot record Events, want once:\n%s", n, c.log())
		}
		if got := leaseEvents(t, namespace, lease); len(got) != 0 {
			t.Errorf("Events recorded without the permission: %v", got)
		}
		if !c.running() {
			t.Error("exited without the Events rule")
		}
	})
	for _, verb := range []string{"get", "list", "watch", "get+watch", "get+list+watch", "update", "lease"} {
		leads := leadsWithout[verb]
		t.Run("without "+verb, func(t *testing.T) {
			namespace := "rbac-no-" + strings.ReplaceAll(verb, "+", "-")
			var rules []rbacv1.PolicyRule
			if verb != "lease" {
				rule := leaseRule
				rule.Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return slices.Contains(strings.Split(verb, "+"), v) })
				rules = []rbacv1.PolicyRule{rule, eventsRule}
			}
			// The shipped Lease exists (without a holder) unless the case
			// is its absence, so taking it needs an update.
			kubeconfig, lease := applyRBAC(t, namespace, rules, verb == "lease")
			o := candidateOptions{lease: lease, namespace: namespace, kubeconfig: kubeconfig}
			refusal := "forbidden"
			if verb == "list" {
				// Only a watch that starts with a list needs it.
				o.env = noStreamingLists
				refusal = `cannot list resource \"leases\"`
			}
			c := startCandidate(t, "crippled", o)
			if verb == "get" {
				// With the watch working, get is not even tried.
				g := groupOf(t, lease, c)
				g.WaitLeader(giveUp)
				return
			}
			err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
				return strings.Contains(c.log(), refusal), nil
			})
			if err != nil {
				t.Fatalf("no %q in the log without %q:\n%s", refusal, verb, c.log())
			}
			if leads {
				g := groupOf(t, lease, c)
				g.WaitLeader(giveUp)
			} else {
				// A lease duration and then some: it never leads.
				if err := holdsFor(leaseDuration+e2eSlack, 100*time.Millisecond, func() error {
					s, err := c.state()
					if err == nil && s.IsLeader {
						err = fmt.Errorf("led without %q", verb)
					}
					return err
				}); err != nil {
					t.Fatal(err)
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
