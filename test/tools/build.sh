#!/usr/bin/env bash
# Builds the control-plane binaries the tests run against, at the versions
# pinned in ./etcd and ./kube, into a cache directory, and prints that
# directory. A warm cache is reused as is: the directory name is a hash of the
# pinning go.mod/go.sum files and of the build recipe below, so changing a
# version or a build flag builds into a new directory and never mixes
# binaries, while an edit elsewhere in this script (a comment, the argument
# handling) reuses what is built: a cold rebuild costs tens of minutes.
#
# Usage: build.sh [NAME...]
#   NAME is etcd or a k8s.io/kubernetes command (kube-apiserver,
#   kube-controller-manager, kubectl, kubelet, ...). With no NAME it builds
#   all that the e2e suite uses: etcd, kube-apiserver, kube-controller-manager
#   (the rollout tests) and kubectl (the docs' commands). The demo and the
#   smoke stage ask for etcd and kube-apiserver only: a cold build of the
#   other two costs minutes they never use.
#
# Environment:
#   LEADER_ELECTOR_TOOLS_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools)
#   KUBE_COMMANDS               extra k8s.io/kubernetes commands to build (space separated)
#   LEADER_ELECTOR_TOOLS_LOCK_HELD  set by a caller that holds $cache_root/.build.lock already
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${LEADER_ELECTOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools}"
# The recipe: how build() below calls go build. Change it with that line.
recipe='CGO_ENABLED=0 go build -trimpath -ldflags "<-s -w, and for Kubernetes the version -X flags>"'
key="$({ cat "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/kube/go.mod "$here"/kube/go.sum; echo "$recipe"; } | sha256sum | cut -c1-16)"
out="$cache_root/$key"
mkdir -p "$out"
# Concurrent runs (make test's stages side by side, TEST_STAGES in the
# Makefile) wait for one another: two builds of the same binary would write
# the same temporary file. The lock is the one test/cluster's EnsureBinaries takes before it
# runs this script; it says so with LEADER_ELECTOR_TOOLS_LOCK_HELD, since a
# second flock of the file from here would wait for the caller forever.
if [[ -z ${LEADER_ELECTOR_TOOLS_LOCK_HELD:-} ]]; then
	exec 9>"$cache_root/.build.lock"
	flock 9
fi

kube_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$here/kube/go.mod")"
kube_minor="$(echo "$kube_version" | cut -d. -f2)"
kube_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor"

build() { # build <module dir> <package> <binary name> [ldflags]
	local dir="$1" pkg="$2" name="$3" ldflags="${4:--s -w}"
	if [[ -x "$out/$name" ]]; then
		return 0
	fi
	echo "building $name ($pkg) — a cold build takes several minutes" >&2
	local start=$SECONDS
	(cd "$here/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	echo "built $name in $((SECONDS - start))s" >&2
}

names=("$@")
if [[ ${#names[@]} -eq 0 ]]; then
	names=(etcd kube-apiserver kube-controller-manager kubectl)
fi
for name in "${names[@]}" ${KUBE_COMMANDS:-}; do
	case "$name" in
	etcd) build etcd go.etcd.io/etcd/server/v3 etcd ;;
	*[!a-z-]* | "") echo "build.sh: $name is not a command name" >&2; exit 2 ;;
	*) build kube "k8s.io/kubernetes/cmd/$name" "$name" "$kube_ldflags" ;;
	esac
done

echo "$out"
