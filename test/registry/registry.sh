#!/usr/bin/env bash
# Installs the OCI registry the release test pushes to — the CNCF
# distribution registry at the version pinned here, built from the Go module
# proxy — into a cache directory, and prints the binary's path. Built once
# (about 6 minutes cold on two cores), reused after: the directory name
# changes with this script.
# Test-only: nothing that ships depends on it.
#
# Environment:
#   LEADER_ELECTOR_TOOLS_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools)
set -euo pipefail

DISTRIBUTION_VERSION=v3.1.2

cache_root="${LEADER_ELECTOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools}"
out="$cache_root/registry-$(sha256sum <"${BASH_SOURCE[0]}" | cut -c1-16)"
mkdir -p "$out"
# Concurrent runs wait for one another instead of building twice.
exec 9>"$out/.lock"
flock 9

if [[ ! -x "$out/registry" ]]; then
	echo "installing registry (github.com/distribution/distribution/v3 $DISTRIBUTION_VERSION) — a cold build takes about 6 minutes" >&2
	start=$SECONDS
	tmp="$(mktemp -d "$out/.gobin.XXXXXX")"
	CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath -ldflags "-s -w" \
		"github.com/distribution/distribution/v3/cmd/registry@$DISTRIBUTION_VERSION"
	mv "$tmp/registry" "$out/registry"
	rmdir "$tmp"
	echo "installed registry in $((SECONDS - start))s" >&2
fi
echo "$out/registry"
