package app

import (
	"context"
	_ "embed"
	"strings"

	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/discovery"
	"k8s.io/klog/v2"
)

// testedReleases is the supported range, written once: the releases the
// tests run against, oldest first (see the file's own comment).
//
//go:embed kube-versions.txt
var testedReleases string

// oldestSupported and newestTested are the minors of the first and last
// release of kube-versions.txt; a malformed file fails every test of this
// package, not a user's start.
var oldestSupported, newestTested = supportedRange(testedReleases)

// supportedRange reads the releases of kube-versions.txt.
func supportedRange(file string) (oldest, newest *version.Version) {
	for _, line := range strings.Split(file, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v := version.MustParseSemantic(line)
		if oldest == nil {
			oldest = v
		}
		newest = v
	}
	if oldest == nil {
		panic("app/kube-versions.txt lists no release")
	}
	return version.MajorMinor(oldest.Major(), oldest.Minor()), version.MajorMinor(newest.Major(), newest.Minor())
}

// reportServerVersion logs the API server's release at startup and says
// when it is outside the supported range: older, where native sidecars may
// be missing and the routing modes' admission policies
// (ValidatingAdmissionPolicy v1, 1.30) are, or newer than any release the
// tests have run. Only a report: the election itself needs no more than the
// coordination.k8s.io/v1 Lease, which every release since 1.14 has, so the
// sidecar runs on regardless. /version is readable by every client (the
// system:public-info-viewer role), so the shipped RBAC needs no rule for it.
func reportServerVersion(ctx context.Context, client discovery.ServerVersionInterface) {
	logger := klog.FromContext(ctx)
	info, err := client.ServerVersion()
	if err != nil {
		logger.Error(err, "Cannot read the API server's version")
		return
	}
	// ParseGeneric, not ParseSemantic: providers add suffixes such as
	// "v1.30.4-gke.1348000" or "v1.31.2-eks-7f9249a".
	v, err := version.ParseGeneric(info.GitVersion)
	if err != nil {
		logger.Error(err, "Cannot parse the API server's version", "serverVersion", info.GitVersion)
		return
	}
	switch {
	case v.LessThan(oldestSupported):
		logger.Error(nil, "The API server is older than the oldest supported Kubernetes release: native sidecars may be missing, and the routing modes' ValidatingAdmissionPolicy (v1 since 1.30) is; the election itself works on any release with coordination.k8s.io/v1 Leases",
			"serverVersion", info.GitVersion, "oldestSupported", oldestSupported.String())
	case v.AtLeast(newestTested.WithMinor(newestTested.Minor() + 1)):
		logger.Info("The API server is newer than any Kubernetes release this version was tested against",
			"serverVersion", info.GitVersion, "newestTested", newestTested.String())
	default:
		logger.Info("API server", "serverVersion", info.GitVersion, "supported", oldestSupported.String()+"–"+newestTested.String())
	}
}
