package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
)

// setting is what every benchmark runs in: a work directory, the code
// measured, its binaries built, and a control plane.
type setting struct {
	work string
	// code names the commit measured (describe).
	code string
	cp   *cluster.ControlPlane
}

// setUp makes a work directory (its name starts with prefix), builds each
// implementation's package into its binary there and starts the control
// plane. On an error it leaves nothing running, and keeps the work
// directory for its logs.
func setUp(ctx context.Context, opts *options, prefix string, impls ...*impl) (*setting, error) {
	work, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	set := &setting{work: work}
	if err := set.prepare(ctx, impls); err != nil {
		finishWorkDir(opts, work, true)
		return nil, err
	}
	return set, nil
}

func (set *setting) prepare(ctx context.Context, impls []*impl) error {
	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	set.code = describe(ctx, root)
	for _, im := range impls {
		name := path.Base(im.pkg)
		if im.pkg == "." {
			name = "leader-elector"
		}
		im.binary = filepath.Join(set.work, "bin", name)
		if err := build(ctx, im.pkg, im.binary); err != nil {
			return err
		}
	}
	set.cp, err = startControlPlane(ctx, set.work)
	return err
}

// tearDown stops the control plane and removes the work directory, unless
// the run failed or opts keep it.
func (set *setting) tearDown(opts *options, failed bool) {
	set.cp.Stop()
	finishWorkDir(opts, set.work, failed)
}

// startControlPlane starts etcd and kube-apiserver with an audit log, which
// attributes every request to its candidate, and grants the bench namespace
// its Leases.
func startControlPlane(ctx context.Context, work string) (*cluster.ControlPlane, error) {
	binDir, err := cluster.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		return nil, fmt.Errorf("control plane binaries: %w", err)
	}
	cp, err := cluster.Start(ctx, cluster.Options{
		BinDir:  binDir,
		WorkDir: filepath.Join(work, "cluster"),
		Log:     logWriter{},
		Audit:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if err := grantLeases(ctx, cp); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// grantLeases lets every service account of the bench namespace use Leases
// (and Events, should an implementation record them). Each candidate runs as
// its own service account so that the audit log tells their requests apart.
func grantLeases(ctx context.Context, cp *cluster.ControlPlane) error {
	cs := cp.AdminClient()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", namespace, err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-candidates", Namespace: namespace},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch"}},
			{APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "update", "patch"}},
		},
	}
	if _, err := cs.RbacV1().Roles(namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-candidates", Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:serviceaccounts:" + namespace}},
	}
	if _, err := cs.RbacV1().RoleBindings(namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create role binding: %w", err)
	}
	return nil
}

// finishWorkDir removes the work dir, unless asked to keep it; a failed
// run keeps its logs (candidates, API server, audit log).
func finishWorkDir(opts *options, work string, failed bool) {
	if opts.KeepWorkDir || failed {
		logf("work dir kept: %s", work)
		return
	}
	os.RemoveAll(work)
}

// build compiles pkg as a release binary (harness.Build.Release), so that
// memory, CPU and latency are those of what ships.
func build(ctx context.Context, pkg, out string) error {
	return harness.BuildBinary(ctx, out, harness.Build{Package: pkg, Release: true})
}

// describe names the code measured: the commit, and whether the working tree
// had changes on top of it, when the binaries were built.
func describe(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "unknown commit"
	}
	return "commit " + strings.TrimSpace(string(out))
}
