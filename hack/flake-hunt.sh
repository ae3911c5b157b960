#!/usr/bin/env bash
# make flake-hunt: runs one test N times in a row under CPU load and reports
# how often it passed, how long each run took and, for each failure, the
# test's own first messages; every run's log is kept in flake-hunt/<test>/.
# A flaky test is hunted with this until its cause is found and fixed (see
# "Flakes" in docs/development.md), never retried in CI.
#
# Usage: hack/flake-hunt.sh TEST N PKG [LOAD]
#   TEST  the test's name, or names as A|B (a -run regexp, anchored here as
#         ^(TEST)$; anchors given with it are dropped)
#   N     how many runs
#   PKG   its package: ./test/e2e/ and the other integration packages are
#         built once with the integration tag; ./test/e2e/node runs through
#         `make e2e-cluster RUN=^TEST$` (root, the real node)
#   LOAD  busy loops beside the test (default: one per core), so that timing
#         bounds meet a machine at least as loaded as CI's
set -uo pipefail
cd "$(dirname "$0")/.."

test_name="$1" runs="$2" pkg="$3" load="${4:-}"
# Anchored here once: a name given as ^Name$ would otherwise be anchored twice
# and match nothing in the log checks below.
test_name="${test_name#^}" test_name="${test_name%\$}"
[[ -n "$load" ]] || load="$(nproc)"
[[ "$runs" =~ ^[1-9][0-9]*$ ]] || { echo "flake-hunt: N must be a positive number, got '$runs'" >&2; exit 2; }
[[ "$load" =~ ^[0-9]+$ ]] || { echo "flake-hunt: LOAD must be a number of busy loops, got '$load'" >&2; exit 2; }
make_cmd="${MAKE:-make}"
# One directory per hunt, named after the test (several names: joined by
# "_", cut to a length every file system takes).
out="flake-hunt/$(printf '%s' "$test_name" | tr -c 'A-Za-z0-9_' '_' | cut -c1-100)"
rm -rf "$out" && mkdir -p "$out"

loaders=()
stop_load() { for p in "${loaders[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop_load EXIT
for ((i = 0; i < load; i++)); do
	(while :; do :; done) &
	loaders+=($!)
done

run_once() { # run_once <log>
	if [[ "$pkg" == ./test/e2e/node || "$pkg" == ./test/e2e/node/ ]]; then
		$make_cmd --no-print-directory e2e-cluster RUN="^(${test_name})\$" NODE_OUT="$1" >/dev/null 2>&1
	else
		"$out/pkg.test" -test.run "^(${test_name})\$" -test.count=1 -test.v -test.timeout 30m >"$1" 2>&1
	fi
}

if [[ "$pkg" != ./test/e2e/node* ]]; then
	go test -tags integration -c -o "$out/pkg.test" "$pkg" || exit 1
	# An integration package finds its tools and the repository from its
	# directory, as `go test` runs it.
	cd "$pkg" && out="$OLDPWD/$out"
fi

passed=0 failed=0 times=()
for ((i = 1; i <= runs; i++)); do
	log="$out/run-$i.log"
	start=$EPOCHREALTIME
	# A run passes only if the test itself ran and passed: a misspelt name
	# matches nothing, and `go test` calls that a pass.
	if run_once "$log" && grep -a -q -E "^--- PASS: (${test_name}) " "$log" && ! grep -a -q -E "^--- FAIL: " "$log"; then
		passed=$((passed + 1)) verdict=pass
	else
		failed=$((failed + 1)) verdict=FAIL
		grep -a -q -E "^=== RUN +(${test_name})\$" "$log" || echo "    ${test_name} did not run: is the name right, and in $pkg?"
	fi
	took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	times+=("$took")
	printf 'flake-hunt: %s run %d/%d: %s in %.1fs\n' "$test_name" "$i" "$runs" "$verdict" "$took"
	if [[ $verdict == FAIL ]]; then
		grep -a -m 3 -E '^\s+[a-z_]+\.go:[0-9]+: ' "$log" | sed 's/^/    /'
	else
		rm -f "$log"
	fi
done

sorted=$(printf '%s\n' "${times[@]}" | sort -n)
median=$(echo "$sorted" | sed -n "$(((runs + 1) / 2))p")
{
	echo "# flake-hunt: $test_name"
	echo
	echo "- package $pkg, commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "- $runs runs beside $load busy loop(s) on $(nproc) cores"
	echo "- passed $passed, failed $failed"
	printf -- '- seconds per run: min %.1f, median %.1f, max %.1f\n' "$(echo "$sorted" | head -1)" "$median" "$(echo "$sorted" | tail -1)"
	[[ $failed -eq 0 ]] || echo "- failing runs' logs: $(ls "$out"/run-*.log 2>/dev/null | xargs -n1 basename | tr '\n' ' ')"
} | tee "$out/report.md"
[[ $failed -eq 0 ]]
