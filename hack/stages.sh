#!/usr/bin/env bash
# Runs make targets as stages, in order: prints when each starts and how long
# it took, stops at the first that fails, and ends with one line per stage,
# so that a CI log says at a glance which stage failed and what each cost.
# Usage: MAKE=make hack/stages.sh STAGE...
set -uo pipefail

make_cmd="${MAKE:-make}"
summary=()
total_start=$SECONDS
for stage in "$@"; do
	start=$SECONDS
	echo "==> stage $stage: started $(date -u +%H:%M:%SZ)"
	$make_cmd --no-print-directory "$stage"
	rc=$?
	took=$((SECONDS - start))
	if [[ $rc -ne 0 ]]; then
		summary+=("$(printf '%-12s FAILED after %ds' "$stage" "$took")")
		echo "==> stage $stage: FAILED after ${took}s (exit $rc)"
		printf '==> %s\n' "${summary[@]}"
		exit "$rc"
	fi
	summary+=("$(printf '%-12s passed in %ds' "$stage" "$took")")
	echo "==> stage $stage: passed in ${took}s"
done
printf '==> %s\n' "${summary[@]}"
echo "==> all stages passed in $((SECONDS - total_start))s"
