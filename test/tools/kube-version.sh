#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager and kubectl (and
# KUBE_COMMANDS) of one Kubernetes release other than the pinned one, for
# `make e2e-matrix`, into a cache directory of its own, and prints that
# directory. etcd is the pinned one (build.sh's): one etcd serves every
# release the matrix runs. The pinned release keeps its own path (build.sh,
# whose cache key this script does not touch); this script refuses it.
#
# A release is pinned by generating its module here, under the cache, rather
# than committing a go.mod per release: the module is k8s.io/kubernetes at
# that version with its staging modules (k8s.io/api, client-go, …, which its
# own go.mod replaces with ./staging paths a dependent cannot use) replaced
# by their published v0.<minor>.<patch>, the same lines test/tools/kube/go.mod
# carries for the pinned release. `go get` resolves the rest through the Go
# module proxy and the checksum database.
#
# Usage: kube-version.sh vMAJOR.MINOR.PATCH
# Environment:
#   LEADER_ELECTOR_TOOLS_CACHE  cache root (as build.sh)
#   KUBE_COMMANDS               extra k8s.io/kubernetes commands to build (space separated)
set -euo pipefail

version="${1:-}"
if ! [[ "$version" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
	echo "kube-version.sh: want a Kubernetes release such as v1.34.4, got '${version}'" >&2
	exit 2
fi
minor="${BASH_REMATCH[1]}"
patch="${BASH_REMATCH[2]}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pinned="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/kube/go.mod")"
if [[ "$version" == "$pinned" ]]; then
	echo "kube-version.sh: $version is the pinned release; build.sh builds it" >&2
	exit 2
fi

etcd_dir="$(bash "$here/build.sh" etcd)"
cache_root="${LEADER_ELECTOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools}"
key="$({ echo "$version"; cat "$here/kube-version.sh"; } | sha256sum | cut -c1-16)"
out="$cache_root/kube-$version-$key"
mod="$out/module"
mkdir -p "$mod"
ln -sfn "$etcd_dir/etcd" "$out/etcd"

if [[ ! -f "$mod/go.sum" ]]; then
	echo "resolving k8s.io/kubernetes $version through the Go module proxy" >&2
	gomod="$(go mod download -json "k8s.io/kubernetes@$version" | awk -F'"' '$2 == "GoMod" {print $4}')"
	[[ -f "$gomod" ]] || { echo "kube-version.sh: the module proxy did not serve k8s.io/kubernetes@$version" >&2; exit 1; }
	go_line="$(awk '$1 == "go" {print $2; exit}' "$gomod")"
	{
		echo "module github.com/leader-elector/leader-elector/test/tools/kube-$version"
		echo
		echo "go $go_line"
		echo
		echo "require k8s.io/kubernetes $version"
		echo
		echo "replace ("
		sed -nE 's|^\s*(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+$|\1|p' "$gomod" | sort -u |
			while read -r m; do printf '\t%s => %s v0.%s.%s\n' "$m" "$m" "$minor" "$patch"; done
		echo ")"
	} >"$mod/go.mod.tmp"
	mv "$mod/go.mod.tmp" "$mod/go.mod"
	commands=(kube-apiserver kube-controller-manager kubectl ${KUBE_COMMANDS:-})
	# Each package at the release: without @version `go get` would move
	# k8s.io/kubernetes to its newest release.
	pkgs=()
	for cmd in "${commands[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd@$version"); done
	(cd "$mod" && GOFLAGS=-mod=mod go get "${pkgs[@]}")
fi

# Releases built with a Go older than this machine's reach into the runtime
# with //go:linkname pulls that newer linkers refuse by default (for example
# github.com/modern-go/reflect2 in 1.30); -checklinkname=0 lets them link, as
# the Go release notes say for such dependencies. The pinned build needs no
# such flag and build.sh does not pass it.
ldflags="-s -w -checklinkname=0 -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
for cmd in kube-apiserver kube-controller-manager kubectl ${KUBE_COMMANDS:-}; do
	[[ -x "$out/$cmd" ]] && continue
	echo "building $cmd $version — a cold build takes several minutes" >&2
	start=$SECONDS
	(cd "$mod" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$out/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
	mv "$out/$cmd.tmp" "$out/$cmd"
	echo "built $cmd $version in $((SECONDS - start))s" >&2
done

echo "$out"
