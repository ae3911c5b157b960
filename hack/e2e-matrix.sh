#!/usr/bin/env bash
# make e2e-matrix: the e2e suite (./test/e2e, real etcd + kube-apiserver, not
# the node suite) once per Kubernetes release given, each release's
# kube-apiserver, kube-controller-manager and kubectl built from the Go module
# proxy and cached (test/tools/build.sh for the pinned release,
# test/tools/kube-version.sh for the others), pointed at with
# LEADER_ELECTOR_TOOLS_DIR (and LEADER_ELECTOR_KUBE_VERSION, the release the
# charts are rendered for). Prints, per release, pass or fail and the
# handover and takeover figures the suite measures; each release's full log
# is e2e-matrix-<release>.out. Exits non-zero if any release failed.
#
# Usage: hack/e2e-matrix.sh RELEASE...   (e.g. v1.30.14 v1.37.2)
set -uo pipefail
cd "$(dirname "$0")/.."

[[ $# -gt 0 ]] || { echo "e2e-matrix: name the Kubernetes releases, e.g. KUBE_VERSIONS='v1.30.14 v1.37.2'" >&2; exit 2; }
pinned="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' test/tools/kube/go.mod)"
# The figures reported per release: the suite's MEASURED lines of a
# graceful handover (SIGTERM, POST /release) and of a takeover after a crash.
figures='MEASURED (first election|graceful handover|crash failover|release:|endpointslice graceful|label crash)'

declare -A result took
failed=0
for v in "$@"; do
	echo "=== e2e-matrix: Kubernetes $v"
	if [[ "$v" == "$pinned" ]]; then
		dir="$(bash test/tools/build.sh)"
	else
		dir="$(bash test/tools/kube-version.sh "$v")"
	fi || { result[$v]="FAIL (build)"; failed=1; continue; }
	got="$("$dir/kube-apiserver" --version)"
	if [[ "$got" != "Kubernetes $v" ]]; then
		echo "e2e-matrix: $dir/kube-apiserver says '$got', want 'Kubernetes $v'" >&2
		result[$v]="FAIL (wrong build)"; failed=1; continue
	fi
	start=$SECONDS
	LEADER_ELECTOR_TOOLS_DIR="$dir" LEADER_ELECTOR_KUBE_VERSION="$v" go test -tags integration -count=1 -timeout 40m -v ./test/e2e/ >"e2e-matrix-$v.out" 2>&1
	rc=$?
	took[$v]=$((SECONDS - start))
	if [[ $rc -eq 0 ]]; then result[$v]=PASS; else result[$v]=FAIL; failed=1; fi
	grep -a -E '^--- FAIL' "e2e-matrix-$v.out" || true
	echo "=== e2e-matrix: Kubernetes $v ${result[$v]} in ${took[$v]}s"
done

echo
echo "e2e-matrix summary (the suite on each release's kube-apiserver; logs in e2e-matrix-<release>.out)"
for v in "$@"; do
	echo "Kubernetes $v: ${result[$v]}${took[$v]:+ in ${took[$v]}s}"
	[[ -f "e2e-matrix-$v.out" ]] && grep -ahoE "$figures.*" "e2e-matrix-$v.out" | sed 's/^/    /'
done
exit $failed
