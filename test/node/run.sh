#!/usr/bin/env bash
# Runs a test binary built from test/e2e/node inside a network namespace made
# for it, then leaves the machine as it found it, and proves it.
#
# The single-node cluster's pod and Service addresses are private-range
# addresses: they exist only inside this namespace (network safety), which
# has no interface but its own loopback and the bridge the harness adds.
# Components run in it with `nsenter --net` (not `ip netns exec`, which also
# remounts /sys and hides the cgroup mounts from the kubelet).
#
# After the test, whatever it did not clean up is removed: processes in the
# namespace and in the kubelet's cgroups, mounts, the pods' network
# namespaces, the kubepods cgroups, the paths containerd and the kubelet
# create regardless of their configuration, and the global sysctls the
# kubelet sets. Then the machine's state is compared with the state before;
# any difference fails the run. Empty kubepods cgroups that an earlier run
# left are removed before the state is taken (see below).
#
# Usage: run.sh <test binary> [test flags]   (as root)
set -euo pipefail

bin="$(readlink -f "$1")"
shift
[[ $(id -u) == 0 ]] || { echo "run.sh: the real-node tests need root (network namespace, containerd, kubelet)" >&2; exit 1; }

ns="leader-elector-node-$$"
work="$(mktemp -d "${TMPDIR:-/tmp}/leader-elector-node.XXXXXX")"
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)
# Paths the kubelet, containerd and the CNI plugins create whatever their
# configuration says.
default_paths=(/var/lib/kubelet /var/log/containers /var/log/pods /run/containerd /var/lib/cni /run/netns /etc/cni /opt/cni /var/run/kubernetes)

snapshot() {
	local s
	for s in "${sysctls[@]}"; do echo "sysctl $s=$(sysctl -n "$s")"; done
	local p
	for p in "${default_paths[@]}"; do [[ -e $p ]] && echo "path $p"; done
	ls -1 /run/netns 2>/dev/null | sed 's/^/netns /' | grep -v "^netns $ns\$" || true
	find /sys/fs/cgroup -maxdepth 2 -name 'kubepods*' 2>/dev/null | sed 's/^/cgroup /'
	ip -o link show | awk '{print "link", $2}'
	ip -o addr show | awk '{print "addr", $2, $4}'
	ip route show | sed 's/^/route /'
	iptables-save 2>/dev/null | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]//' | sed 's/^/iptables /'
	awk '{print "mount", $5}' /proc/self/mountinfo | sort
}

# kubepods_cgroups lists every kubepods cgroup directory, deepest first (the
# order rmdir needs).
kubepods_cgroups() { find /sys/fs/cgroup/*/ -depth -type d -path '*kubepods*' 2>/dev/null || true; }

# kubepods cgroups found before the run are an earlier run's leftovers (a
# run cut short skips its cleanup). This run's cleanup removes every
# kubepods cgroup, so empty ones are removed first and the snapshot is taken
# without them. One that holds a task belongs to a kubelet that is running:
# the cleanup would kill its pods, so the run stops.
leftover="$(kubepods_cgroups)"
if [[ -n $leftover ]]; then
	tasks="$(find /sys/fs/cgroup/*/ -path '*kubepods*' \( -name cgroup.procs -o -name tasks \) -exec cat {} + 2>/dev/null | sort -u || true)"
	if [[ -n $tasks ]]; then
		echo "run.sh: kubepods cgroups hold tasks ($(echo $tasks)): a kubelet runs on this machine, and the node tests would kill its pods" >&2
		exit 1
	fi
	echo "run.sh: removing $(wc -l <<<"$leftover") empty kubepods cgroups an earlier run left" >&2
	for d in $leftover; do
		rmdir "$d" || { echo "run.sh: cannot remove the leftover cgroup $d" >&2; exit 1; }
	done
fi

before="$(snapshot)"

# kill_left <say>: SIGKILL every process still in the test's network
# namespace or in a kubepods cgroup, until none is left (3 rounds).
kill_left() {
	local i pids
	for i in 1 2 3; do
		pids="$(ip netns pids "$ns" 2>/dev/null; find /sys/fs/cgroup/*/kubepods* -name cgroup.procs -exec cat {} + 2>/dev/null)"
		pids="$(echo "$pids" | grep -vx "$$" | sort -u)"
		[[ -z $pids ]] && return
		[[ $1 == 1 && $i == 1 ]] && echo "run.sh: killing processes the test left: $(echo $pids)" >&2
		kill -9 $pids 2>/dev/null
		sleep 1
	done
}

cleanup() {
	local rc=$?
	set +e
	# Frozen cgroups first: a frozen task only dies once thawed.
	for f in $(find /sys/fs/cgroup/freezer -path '*kubepods*' -name freezer.state 2>/dev/null); do echo THAWED >"$f"; done
	for f in $(find /sys/fs/cgroup/kubepods* -name cgroup.freeze 2>/dev/null); do echo 0 >"$f"; done
	kill_left 1
	# Mounts under the work dir (volumes) and the pods' network namespaces.
	for m in $(awk -v w="$work" '$5 == w || index($5, w "/") == 1 {print $5}' /proc/self/mountinfo | sort -r); do umount -l "$m"; done
	for f in /run/netns/cni-*; do
		[[ -e $f ]] || continue
		grep -qx "netns ${f#/run/netns/}" <<<"$before" && continue
		umount -l "$f" 2>/dev/null; rm -f "$f"
	done
	# A cgroup cannot be removed while a task in it is still exiting (a
	# killed process with much memory, or one killed while it was being
	# thawed), so removal is retried, killing again what appeared meanwhile,
	# for up to 30 s; then what still holds a cgroup is printed.
	local left until=$((SECONDS + 30))
	while :; do
		for d in $(kubepods_cgroups); do rmdir "$d" 2>/dev/null; done
		left="$(kubepods_cgroups)"
		[[ -z $left || $SECONDS -ge $until ]] && break
		kill_left 0
		sleep 1
	done
	if [[ -n $left ]]; then
		echo "run.sh: cgroups that could not be removed in 30 s, and the tasks in them:" >&2
		for d in $left; do echo "run.sh:   $d: $(cat "$d/cgroup.procs" "$d/tasks" 2>/dev/null | sort -u | tr '\n' ' ')" >&2; done
		ps -eo pid,ppid,stat,comm 2>/dev/null | awk '$3 ~ /^[ZD]/' | sed 's/^/run.sh:   /' >&2
	fi
	ip netns del "$ns" 2>/dev/null
	for s in "${sysctls[@]}"; do
		v="$(grep "^sysctl $s=" <<<"$before" | cut -d= -f2-)"
		[[ "$(sysctl -n "$s")" == "$v" ]] || sysctl -qw "$s=$v"
	done
	for p in "${default_paths[@]}"; do
		grep -qx "path $p" <<<"$before" && continue
		# `ip netns add` mounts /run/netns on itself when it makes it.
		while mountpoint -q "$p" 2>/dev/null; do umount "$p" || break; done
		rm -rf "$p"
	done
	if [[ -n ${LEADER_ELECTOR_NODE_KEEP:-} ]]; then
		echo "run.sh: kept the work dir (logs, configuration) in $work" >&2
	else
		rm -rf "$work"
	fi
	after="$(snapshot)"
	if [[ "$before" != "$after" ]]; then
		echo "run.sh: FAIL: the machine is not as it was before the tests:" >&2
		diff <(echo "$before") <(echo "$after") | sed 's/^/run.sh:   /' >&2
		rc=1
	else
		echo "run.sh: machine state restored (sysctls, links, addresses, routes, iptables, mounts, cgroups, paths)" >&2
	fi
	exit "$rc"
}
trap cleanup EXIT

ip netns add "$ns"
echo "run.sh: running the tests in network namespace $ns" >&2
# The harness refuses to start unless its network namespace differs from
# this one (it cannot read pid 1's in every sandbox).
LEADER_ELECTOR_NODE_HOST_NETNS="$(readlink /proc/self/ns/net)" LEADER_ELECTOR_NODE_WORKDIR="$work" nsenter --net="/run/netns/$ns" "$bin" "$@"
