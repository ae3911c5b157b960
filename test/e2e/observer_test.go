//go:build integration

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
)

// TestObserver: a --candidate=false sidecar, running with the shipped
// observer Role (get, list and watch on the one Lease), follows who leads through
// a handover and a crash, answers POST /acquire with 409 and POST /release
// with released:false, is ready (readiness candidate), and never sends a
// write: the API server's audit log shows none from its ServiceAccount.
func TestObserver(t *testing.T) {
	ctx := context.Background()
	// A control plane of its own, with an audit log of every request.
	cp, err := cluster.Start(ctx, cluster.Options{BinDir: kubeBinDir, WorkDir: t.TempDir(), Audit: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cp.Stop)

	// The shipped observer Role: the base's Role with the component's rules.
	var component struct {
		Patches []struct {
			Patch string `json:"patch"`
		} `json:"patches"`
	}
	readYAML(t, repoRoot+"/manifests/components/observer/kustomization.yaml", &component)
	var ops []struct {
		Value []rbacv1.PolicyRule `json:"value"`
	}
	if len(component.Patches) != 1 || yaml.Unmarshal([]byte(component.Patches[0].Patch), &ops) != nil || len(ops) != 1 {
		t.Fatalf("the observer component is not one patch replacing the Role's rules: %+v", component)
	}
	rules := ops[0].Value
	lease := "leader-elector" // the name the shipped rules give
	for _, r := range rules {
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("the observer Role allows %q", v)
			}
		}
	}
	kubeconfig := observerKubeconfig(t, cp, rules)

	admin := candidateOptions{lease: lease, kubeconfig: cp.AdminKubeconfig()}
	g := groupOf(t, lease)
	g.monitor = startMonitor(t, g.Members)
	for i := range 2 {
		g.Add(startCandidate(t, fmt.Sprintf("observed-%d", i), admin))
	}
	obs := startCandidate(t, "observer", candidateOptions{lease: lease, kubeconfig: kubeconfig, extraArgs: []string{"--candidate=false"}})
	g.Add(obs) // the monitor checks it never claims

	observerFollowsAndRefuses(t, g, obs)

	// The observer stops (SIGTERM: what it does on shutdown counts too),
	// which ends its watch: the apiserver audits a request when it
	// completes.
	obs.signal(syscall.SIGTERM)
	if code, err := obs.waitExit(giveUp); err != nil || code != 0 {
		t.Errorf("observer exit = %d %v, want 0", code, err)
	}

	// The audit log: requests from the observer's ServiceAccount, none a
	// write.
	user := "system:serviceaccount:default:observer"
	var reads, writes []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
		events, err := cp.AuditEvents()
		if err != nil {
			return false, err
		}
		reads, writes = nil, nil
		for _, ev := range events {
			if ev.User.Username != user {
				continue
			}
			switch ev.Verb {
			case "get", "list", "watch":
				reads = append(reads, ev.Verb+" "+ev.RequestURI)
			default:
				writes = append(writes, ev.Verb+" "+ev.RequestURI)
			}
		}
		return len(reads) > 0, nil
	})
	if err != nil {
		users := map[string]int{}
		if events, err := cp.AuditEvents(); err == nil {
			for _, ev := range events {
				users[ev.User.Username]++
			}
		}
		t.Fatalf("no request of %s in the audit log: %v; requests by user: %v", user, err, users)
	}
	if len(writes) > 0 {
		t.Errorf("the observer sent writes: %v", writes)
	}
	t.Logf("the observer sent %d reads and no write", len(reads))
}

// observerKubeconfig makes the ServiceAccount "observer" with rules in
// namespace default of cp, and returns a kubeconfig with its token.
func observerKubeconfig(t *testing.T, cp *cluster.ControlPlane, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := context.Background()
	cs := cp.AdminClient()
	role := &rbacv1.Role{Rules: rules}
	role.Name = "observer"
	if _, err := cs.RbacV1().Roles("default").Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "observer"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "observer", Namespace: "default"}},
	}
	binding.Name = "observer"
	if _, err := cs.RbacV1().RoleBindings("default").Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, "default", "observer")
	if err != nil {
		t.Fatal(err)
	}
	return kubeconfig
}

// observerFollowsAndRefuses checks an observer (--candidate=false) in g on
// either lease store: it follows the leader, is ready (readiness
// candidate), answers POST /acquire with 409 and POST /release with
// released: false, and follows a handover and a crash. It returns the
// leader after the crash.
func observerFollowsAndRefuses(t *testing.T, g *group, obs *candidate) *candidate {
	t.Helper()
	leader := g.WaitLeader(giveUp)
	harnesstest.WaitFollowing(t, obs, leader)
	if code, body, err := obs.probe("/readyz"); err != nil || code != http.StatusOK {
		t.Errorf("observer /readyz = %d %s %v, want 200 (readiness candidate)", code, body, err)
	}
	code, _, body, err := obs.do("POST", "/acquire", nil)
	if err != nil || code != http.StatusConflict || !strings.Contains(string(body), "observer") {
		t.Errorf("observer POST /acquire = %d %s %v, want 409 saying it is an observer", code, body, err)
	}
	if r := obs.release(t); r.Released || r.Holder != leader.name {
		t.Errorf("observer POST /release = %+v, want released false", r)
	}
	leader.release(t)
	next := g.WaitLeader(handoverBound, leader)
	harnesstest.WaitFollowing(t, obs, next)
	next.h.Kill()
	last := g.WaitLeader(takeoverBound, next)
	harnesstest.WaitFollowing(t, obs, last)
	return last
}
