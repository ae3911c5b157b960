//go:build integration

package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/filelease"
)

// leaseStore is where a test's candidates elect: the control plane's
// Lease API, or a lease file (--lease-store=file:). Its client reads and
// writes that store's Leases, for the test's own checks and set-up; on a
// file it is the filelease package the sidecar itself serves the file
// with.
type leaseStore struct {
	name   string
	file   string // "" on the API server
	client kubernetes.Interface
}

// kubeStore is the control plane's Lease API.
func kubeStore() leaseStore {
	return leaseStore{name: "kubernetes", client: controlPlane.AdminClient()}
}

// fileStore is a lease file of the test's own.
func fileStore(t *testing.T) leaseStore {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lease.json")
	cfg, stop, err := filelease.Start(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return leaseStore{name: "file", file: path, client: kubernetes.NewForConfigOrDie(cfg)}
}

// on returns o electing through this store.
func (s leaseStore) on(o candidateOptions) candidateOptions {
	o.leaseFile = s.file
	return o
}

// onEachStore runs test on both stores, as subtests named after them: the
// application API's semantics are the same on both (docs/api.md, "Lease
// stores").
func onEachStore(t *testing.T, test func(t *testing.T, s leaseStore)) {
	t.Run("kubernetes", func(t *testing.T) { test(t, kubeStore()) })
	t.Run("file", func(t *testing.T) { test(t, fileStore(t)) })
}
