package options

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// The lease stores --lease-store names.
const (
	leaseStoreKubernetes = "kubernetes"
	leaseStoreFilePrefix = "file:"
)

// kubernetesOnlyFlags are the flags that configure the API server's
// clients or objects other than the Lease: with --lease-store=file: there
// is none, so giving one is a mistake, refused rather than ignored.
// --events is on by default and turned off by the file store without a
// word: only giving it is refused. The proxy finds the leader through its
// Pod (--proxy-address), which needs the API server too.
var kubernetesOnlyFlags = []string{"kubeconfig", "kube-api-qps", "kube-api-burst", "events", "route", "service", "pod-ip", "leader-label", "partitions", "drain-timeout", "proxy-address"}

func (o *Options) addLeaseStoreFlag(fs *pflag.FlagSet) {
	// The default is empty, which is "kubernetes", so that an Options
	// without the flag (a test's, a library user's) is the Kubernetes Lease.
	fs.StringVar(&o.LeaseStore, "lease-store", o.LeaseStore, "Where the Lease is kept: \"kubernetes\" (the default: the coordination.k8s.io/v1 Lease) or \"file:PATH\", a file that candidates on one machine elect through, with no cluster (no routing, Events or partitions; see docs/api.md#lease-stores).")
}

// noteGivenFlags remembers which Kubernetes-only flags the command line or
// their LEADER_ELECTOR_* variables set ($KUBECONFIG is not one: it is
// the user's shell's, not a setting of this sidecar).
func (o *Options) noteGivenFlags(fs *pflag.FlagSet) {
	if o.leaseFile() == "" {
		return
	}
	for _, name := range kubernetesOnlyFlags {
		if fs.Changed(name) {
			o.kubernetesOnlyGiven = append(o.kubernetesOnlyGiven, "--"+name)
		}
	}
}

// leaseFile is the file of --lease-store=file:PATH, or "" for Kubernetes.
func (o *Options) leaseFile() string {
	file, _ := strings.CutPrefix(o.LeaseStore, leaseStoreFilePrefix)
	if file == o.LeaseStore {
		return ""
	}
	return file
}

// validateLeaseStore checks --lease-store and that no Kubernetes-only flag
// comes with the file store.
func (o *Options) validateLeaseStore() []error {
	switch {
	case o.LeaseStore == "" || o.LeaseStore == leaseStoreKubernetes:
		return nil
	case !strings.HasPrefix(o.LeaseStore, leaseStoreFilePrefix):
		return []error{fmt.Errorf("--lease-store %q is unknown (want \"kubernetes\" or \"file:PATH\")", o.LeaseStore)}
	case o.leaseFile() == "":
		return []error{fmt.Errorf("--lease-store=file: needs the file's path (file:PATH)")}
	case len(o.kubernetesOnlyGiven) > 0:
		return []error{fmt.Errorf("--lease-store=file: has no Kubernetes API; %s cannot be used with it", strings.Join(o.kubernetesOnlyGiven, ", "))}
	}
	return nil
}
