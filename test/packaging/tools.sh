#!/usr/bin/env bash
# Installs the packaging tools the tests use — helm and kustomize at the
# versions pinned here — from the Go module proxy into a cache directory, and
# prints that directory. Installed once, reused after (the directory name
# changes with this script).
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
out="$cache_root/packaging-$(sha256sum <"${BASH_SOURCE[0]}" | cut -c1-16)"
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

echo "$out"
