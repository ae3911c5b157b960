#!/usr/bin/env bash
# Installs the packaging tools the tests use — helm and kustomize at the
# versions pinned here, and kube-controller-manager at the version pinned in
# ./kcm (for the rollout tests) — from the Go module proxy into a cache
# directory, and prints that directory. Installed once, reused after (the
# directory name changes with this script and ./kcm's go.mod and go.sum).
# Test-only: nothing that ships depends on them.
#
# Environment:
#   LEADER_ELECTOR_TOOLS_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools)
set -euo pipefail

HELM_VERSION=v3.19.5
KUSTOMIZE_VERSION=v5.8.1

cache_root="${LEADER_ELECTOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools}"
# The directory name changes with this script (versions, flags), so an edit
# here never reuses binaries built by an older version of it.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="$cache_root/packaging-$(cat "${BASH_SOURCE[0]}" "$here/kcm/go.mod" "$here/kcm/go.sum" | sha256sum | cut -c1-16)"
mkdir -p "$out"
# Concurrent test processes wait for one another instead of building twice.
exec 9>"$out/.lock"
flock 9

install() { # install <binary> <package@version> [ldflags]
	local name="$1" pkg="$2" ldflags="${3:-}"
	if [[ -x "$out/$name" ]]; then
		return 0
	fi
	echo "installing $name ($pkg) — a cold build takes a few minutes" >&2
	local start=$SECONDS tmp
	tmp="$(mktemp -d "$out/.gobin.XXXXXX")"
	CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "-s -w $ldflags" "$pkg"
	mv "$tmp/$name" "$out/$name"
	rmdir "$tmp"
	echo "installed $name in $((SECONDS - start))s" >&2
}

# As helm's own release build does: its version, and the Kubernetes version
# it assumes without a cluster (that of the client-go it is built with,
# v0.34 → 1.34), which `go install` alone leaves at 1.20.
helm_ldflags="-X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	helm_ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=34"
done
install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" "$helm_ldflags"
install kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION"

if [[ ! -x "$out/kube-controller-manager" ]]; then
	kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/kcm/go.mod")"
	echo "building kube-controller-manager $kube_version — a cold build takes several minutes" >&2
	start=$SECONDS
	(cd "$here/kcm" && CGO_ENABLED=0 go build -trimpath -o "$out/kube-controller-manager.tmp" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kube_version" | cut -d. -f2)" \
		k8s.io/kubernetes/cmd/kube-controller-manager)
	mv "$out/kube-controller-manager.tmp" "$out/kube-controller-manager"
	echo "built kube-controller-manager in $((SECONDS - start))s" >&2
fi

echo "$out"
