//go:build integration

package cluster

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestControlPlane exercises a whole control-plane lifecycle: start, admin
// and service-account access, freeze/thaw, kill/restart on the same port
// with etcd keeping the data, and a Stop that leaves no process behind.
func TestControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	logw := &testLogWriter{t: t}

	bin, err := EnsureBinaries(ctx, logw)
	if err != nil {
		t.Fatalf("EnsureBinaries: %v", err)
	}
	began := time.Now()
	cp, err := Start(ctx, Options{BinDir: bin, WorkDir: t.TempDir(), Log: logw, Audit: true})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(cp.Stop)
	t.Logf("TIMING start to ready: %v", since(began))
	if !strings.HasPrefix(cp.Host(), "https://127.0.0.1:") {
		t.Errorf("Host() = %q, want https://127.0.0.1:<port>", cp.Host())
	}

	// The admin creates a Lease, through the clientset and the kubeconfig.
	admin := cp.AdminClient()
	holder := "candidate-a"
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "cluster-test", Namespace: "default"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}
	if _, err := admin.CoordinationV1().Leases("default").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating lease as admin: %v", err)
	}
	adminFromFile := clientFromKubeconfig(t, cp.AdminKubeconfig(), "cluster-test-admin")
	if _, err := adminFromFile.CoordinationV1().Leases("default").Get(ctx, "cluster-test", metav1.GetOptions{}); err != nil {
		t.Fatalf("getting lease through the admin kubeconfig: %v", err)
	}

	// A fresh ServiceAccount authenticates but has no RBAC grant.
	saKubeconfig, err := cp.ServiceAccountKubeconfig(ctx, "cluster-test", "elector")
	if err != nil {
		t.Fatalf("ServiceAccountKubeconfig: %v", err)
	}
	const saUser = "system:serviceaccount:cluster-test:elector"
	sa := clientFromKubeconfig(t, saKubeconfig, "cluster-test-sa")
	review, err := sa.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview as the service account: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != saUser {
		t.Fatalf("service account authenticated as %q, want %q", got, saUser)
	}
	assertForbidden := func(when string) {
		t.Helper()
		_, err := sa.CoordinationV1().Leases("cluster-test").List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s: listing leases as the service account: got %v, want Forbidden", when, err)
		}
	}
	assertForbidden("before restart")

	// Metrics are reachable; the audit log attributes requests to clients.
	metrics, err := cp.MetricsText(ctx)
	if err != nil {
		t.Fatalf("MetricsText: %v", err)
	}
	if !strings.Contains(metrics, "apiserver_request_total{") {
		t.Errorf("/metrics has no apiserver_request_total")
	}
	waitForAuditEvent(t, cp, func(ev AuditEvent) bool {
		return ev.User.Username == saUser && strings.HasPrefix(ev.UserAgent, "cluster-test-sa") &&
			ev.Verb == "list" && ev.ObjectRef != nil && ev.ObjectRef.Resource == "leases" &&
			ev.ResponseStatus != nil && ev.ResponseStatus.Code == 403
	})

	// A frozen apiserver accepts connections but never answers.
	if err := cp.FreezeAPIServer(); err != nil {
		t.Fatalf("FreezeAPIServer: %v", err)
	}
	frozenCtx, cancelFrozen := context.WithTimeout(ctx, time.Second)
	_, err = admin.CoordinationV1().Leases("default").Get(frozenCtx, "cluster-test", metav1.GetOptions{})
	cancelFrozen()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("request to a frozen apiserver: got %v, want a deadline error", err)
	}
	if err := cp.ThawAPIServer(); err != nil {
		t.Fatalf("ThawAPIServer: %v", err)
	}
	if _, err := admin.CoordinationV1().Leases("default").Get(ctx, "cluster-test", metav1.GetOptions{}); err != nil {
		t.Fatalf("request after thaw: %v", err)
	}

	// A killed apiserver refuses connections; restarted on the same port it
	// serves the Lease etcd kept, and honours the tokens it issued before.
	host := cp.Host()
	oldPID := apiServerPID(cp)
	if err := cp.KillAPIServer(); err != nil {
		t.Fatalf("KillAPIServer: %v", err)
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("apiserver pid %d still exists after KillAPIServer (kill 0: %v)", oldPID, err)
	}
	// Dial the port itself: a client's pooled connection may not have seen
	// the reset yet, and then fails with another error.
	if conn, err := net.DialTimeout("tcp", strings.TrimPrefix(host, "https://"), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("connecting to a killed apiserver: got %v, want connection refused", err)
	}
	restartBegan := time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	t.Logf("TIMING restart to ready: %v", since(restartBegan))
	if cp.Host() != host {
		t.Fatalf("Host changed across restart: %s -> %s", host, cp.Host())
	}
	got, err := admin.CoordinationV1().Leases("default").Get(ctx, "cluster-test", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting lease after restart: %v", err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != holder {
		t.Fatalf("lease after restart has holder %v, want %q", got.Spec.HolderIdentity, holder)
	}
	assertForbidden("after restart")

	// Stop leaves nothing running and may be called again.
	pids := []int{apiServerPID(cp), cp.etcd.cmd.Process.Pid}
	cp.Stop()
	cp.Stop()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("pid %d still exists after Stop (kill 0: %v)", pid, err)
		}
	}
	if err := cp.StartAPIServer(ctx); err == nil {
		t.Errorf("StartAPIServer after Stop succeeded")
	}
}

// TestStartFailure checks that a component dying during start-up fails Start
// with the tail of its log and leaves no process behind.
func TestStartFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd")
	}
	bin, err := EnsureBinaries(t.Context(), &testLogWriter{t: t})
	if err != nil {
		t.Fatalf("EnsureBinaries: %v", err)
	}
	fakeBin := t.TempDir()
	if err := os.Symlink(filepath.Join(bin, "etcd"), filepath.Join(fakeBin, "etcd")); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\necho 'fake apiserver: cannot start' >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(fakeBin, "kube-apiserver"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}

	workDir := t.TempDir()
	cp, err := Start(t.Context(), Options{BinDir: fakeBin, WorkDir: workDir, Log: &testLogWriter{t: t}})
	if err == nil {
		cp.Stop()
		t.Fatal("Start with a failing kube-apiserver succeeded")
	}
	t.Logf("Start error (expected): %v", err)
	if !strings.Contains(err.Error(), "fake apiserver: cannot start") || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("error does not show the exit status and log tail: %v", err)
	}
	// etcd was running; Start must have killed it. Its data dir is in this
	// test's WorkDir, so a survivor would show up as a process using it.
	out, _ := exec.Command("pgrep", "-f", "--", "--data-dir="+filepath.Join(workDir, "etcd")).Output()
	if pids := strings.TrimSpace(string(out)); pids != "" {
		t.Errorf("etcd left running after a failed Start: pids %s", pids)
	}
}

func clientFromKubeconfig(t *testing.T, path, userAgent string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading %s: %v", path, err)
	}
	if cfg.Insecure || len(cfg.CAData) == 0 {
		t.Fatalf("%s does not verify the server with an embedded CA", path)
	}
	cfg.UserAgent = userAgent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", path, err)
	}
	return cs
}

func apiServerPID(c *ControlPlane) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.apiserver.cmd.Process.Pid
}

// waitForAuditEvent polls the audit log, which the apiserver writes as each
// request completes, until an event matches.
func waitForAuditEvent(t *testing.T, c *ControlPlane, match func(AuditEvent) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		events, err := c.AuditEvents()
		if err != nil {
			t.Fatalf("AuditEvents: %v", err)
		}
		for _, ev := range events {
			if match(ev) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching audit event among %d", len(events))
		}
		<-tick.C
	}
}

// testLogWriter turns writes into t.Log lines.
type testLogWriter struct {
	t   *testing.T
	mu  sync.Mutex
	buf bytes.Buffer
}

func (w *testLogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadString('\n')
		if err != nil {
			// Keep the incomplete line for the next write.
			w.buf.Reset()
			w.buf.WriteString(line)
			return len(p), nil
		}
		w.t.Log(strings.TrimRight(line, "\n"))
	}
}
