#!/usr/bin/env bash
# Builds the control-plane binaries the e2e tests run against (etcd,
# kube-apiserver and kube-controller-manager, at the versions pinned in ./etcd
# and ./kube) and the kubectl the tests run the docs' commands with into a
# cache directory, and prints that directory. A warm cache is reused as is: the
# directory name is a hash of the pinning go.mod/go.sum files, so changing a
# version builds into a new directory and never mixes binaries.
#
# Environment:
#   LEADER_ELECTOR_TOOLS_CACHE  cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools)
#   KUBE_COMMANDS               extra k8s.io/kubernetes commands to build (space separated)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache_root="${LEADER_ELECTOR_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/leader-elector/tools}"
key="$(cat "$here"/etcd/go.mod "$here"/etcd/go.sum "$here"/kube/go.mod "$here"/kube/go.sum "$here"/build.sh | sha256sum | cut -c1-16)"
out="$cache_root/$key"
mkdir -p "$out"

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

build etcd go.etcd.io/etcd/server/v3 etcd
build kube k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$kube_ldflags"
# The rollout tests run the Deployment and ReplicaSet controllers.
build kube k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$kube_ldflags"
# The docs' kubectl commands run with the real kubectl, at the cluster's
# version (test/e2e TestDocSnippets, the rollout tests on the node).
build kube k8s.io/kubernetes/cmd/kubectl kubectl "$kube_ldflags"
for cmd in ${KUBE_COMMANDS:-}; do
	build kube "k8s.io/kubernetes/cmd/$cmd" "$cmd" "$kube_ldflags"
done

echo "$out"
