package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness"
)

// namespace holds every Lease and service account of the run.
const namespace = "bench"

// impl is one implementation under test.
type impl struct {
	// key names it in the table and in Lease and candidate names.
	key    string
	binary string
	// prefix starts its candidates' identities (and service accounts).
	prefix string
	// leaderElector: it serves probes, /events, validUntil and fencingToken,
	// so the monitor checks those too.
	leaderElector bool
	// partitions > 0 runs leader-elector in partition mode (--partitions).
	partitions int
}

// run builds both implementations, starts the control plane, benchmarks
// each implementation in turn and prints the table.
func run(ctx context.Context, opts *options) (err error) {
	began := time.Now()
	busy0, err := machineBusyTicks()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "leader-elector-bench-")
	if err != nil {
		return fmt.Errorf("create work dir: %w", err)
	}
	defer func() { finishWorkDir(opts, work, err != nil) }()

	root, err := harness.RepoRoot()
	if err != nil {
		return err
	}
	code := describe(ctx, root)
	impls := []*impl{
		{key: "baseline", binary: filepath.Join(work, "bin", "baseline"), prefix: "base"},
		{key: "leader-elector", binary: filepath.Join(work, "bin", "leader-elector"), prefix: "le", leaderElector: true},
	}
	for _, im := range impls {
		pkg := "."
		if !im.leaderElector {
			pkg = "./bench/baseline"
		}
		if err := build(ctx, pkg, im.binary); err != nil {
			return err
		}
	}

	cp, err := startControlPlane(ctx, work)
	if err != nil {
		return err
	}
	defer cp.Stop()
	logf("control plane ready at %s; timings: lease %v, renew %v, retry %v; %d candidates",
		cp.Host(), opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod, opts.Candidates)

	var results []*implResult
	for _, im := range impls {
		logf("=== %s", im.key)
		res, err := benchImpl(ctx, opts, cp, filepath.Join(work, im.key), im)
		if err != nil {
			return fmt.Errorf("%s: %w", im.key, err)
		}
		results = append(results, res)
	}
	logf("=== GET /leader load, the implementations taking turns")
	if err := httpLoad(ctx, opts, cp, filepath.Join(work, "http"), impls, results); err != nil {
		return fmt.Errorf("HTTP load: %w", err)
	}

	table := renderTable(opts, results[0], results[1])
	busy1, err := machineBusyTicks()
	if err != nil {
		return err
	}
	took := time.Since(began)
	busyCores := float64(busy1-busy0) / clockTicksPerSecond / took.Seconds()
	notes := renderNotes(opts, results, took, busyCores) + fmt.Sprintf("\nCode: %s, %s.\n", code, machine())
	fmt.Println()
	fmt.Print(table)
	fmt.Println()
	fmt.Print(notes)
	if opts.Output != "" {
		if err := os.WriteFile(opts.Output, []byte(table+"\n"+notes), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", opts.Output, err)
		}
	}
	// Only leader-elector's safety fails the run: the baseline's findings
	// are reported, not ours to fix (client-go compares Lease records at
	// one-second precision, so with a sub-second retry period a follower can
	// take an abandoned Lease up to a second early).
	if n := results[1].safetyViolations(); n > 0 {
		return fmt.Errorf("leader-elector: %d safety violations; see the notes above", n)
	}
	return nil
}

// benchImpl runs every phase for one implementation on its own Lease.
func benchImpl(ctx context.Context, opts *options, cp *cluster.ControlPlane, work string, im *impl) (*implResult, error) {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", work, err)
	}
	res := &implResult{impl: im}
	g := newGroup(opts, cp, im, "bench-"+im.key, work)
	defer g.stopAll()

	history, stopHistory, err := watchLease(ctx, cp.AdminClient(), namespace, g.lease)
	if err != nil {
		return nil, err
	}
	defer stopHistory()
	g.startPolling()
	for range opts.Candidates {
		if _, err := g.start(ctx); err != nil {
			return nil, err
		}
	}
	leader, err := g.waitLeader(ctx, nil, 30*time.Second+opts.LeaseDuration)
	if err != nil {
		return nil, fmt.Errorf("first election: %w", err)
	}
	if err := g.waitFollowing(ctx, leader); err != nil {
		return nil, err
	}

	if err := handovers(ctx, opts, g, history, res); err != nil {
		return nil, fmt.Errorf("graceful handovers: %w", err)
	}
	if err := crashes(ctx, opts, g, history, res); err != nil {
		return nil, fmt.Errorf("crash failovers: %w", err)
	}
	// Polling and the watch would be most of an idle candidate's work.
	g.stopPolling()
	stopHistory()
	res.monitor = g.mon.Check()
	g.mu.Lock()
	res.toAnswer, res.toElection = g.toAnswer, g.toElection
	g.mu.Unlock()

	if err := idle(ctx, opts, g, res); err != nil {
		return nil, fmt.Errorf("idle: %w", err)
	}
	if err := countRequests(cp, res); err != nil {
		return nil, err
	}
	users := map[string]bool{}
	g.mu.Lock()
	for _, c := range g.members {
		users[c.user] = true
	}
	g.mu.Unlock()
	if err := countWindowRequests(cp, users, res.handoverRequests, res.crashRequests); err != nil {
		return nil, err
	}
	return res, nil
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

// logWriter sends the control plane's progress lines to the bench log.
type logWriter struct{}

func (logWriter) Write(p []byte) (int, error) {
	logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// logf prints a progress line on stderr; the table goes to stdout.
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
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

// machine describes where the figures were taken.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d CPUs (%s), %s", runtime.NumCPU(), model, runtime.Version())
}
