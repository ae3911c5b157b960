#!/usr/bin/env bash
# Runs make targets as stages, in order: prints when each starts and how long
# it took, stops at the first that fails, and ends with one line per stage,
# so that a CI log says at a glance which stage failed and what each cost.
#
# A STAGE of the form a+b runs the targets a and b side by side, each line
# of their output prefixed with "[a] " or "[b] ": the e2e and node stages
# spend most of their time waiting on lease timings and on the node's
# components (a sequential run kept about half of the two cores busy), so
# together they took little more than the longer one alone (37 minutes
# instead of about 55), at the price of a doubled load: CI does not run them so
# (docs/development.md). Each prints its
# own time when it ends; the group fails if either does, once both ended (the
# other one's results stay in the log, and a node run cut short would leave
# the machine to clean up).
#
# Usage: MAKE=make hack/stages.sh STAGE...
set -uo pipefail

make_cmd="${MAKE:-make}"
summary=()
total_start=$SECONDS

# run_one <stage>: runs one stage in the foreground; returns its exit code.
run_one() {
	local stage="$1" start=$SECONDS rc took
	echo "==> stage $stage: started $(date -u +%H:%M:%SZ)"
	$make_cmd --no-print-directory "$stage"
	rc=$?
	took=$((SECONDS - start))
	record "$stage" "$rc" "$took"
	return "$rc"
}

# record <stage> <exit code> <seconds>: prints a stage's end and keeps its
# summary line.
record() {
	local stage="$1" rc="$2" took="$3"
	if [[ $rc -ne 0 ]]; then
		summary+=("$(printf '%-12s FAILED after %ds' "$stage" "$took")")
		echo "==> stage $stage: FAILED after ${took}s (exit $rc)"
	else
		summary+=("$(printf '%-12s passed in %ds' "$stage" "$took")")
		echo "==> stage $stage: passed in ${took}s"
	fi
}

# run_group <stage>...: runs the stages side by side; returns 0 if all
# passed, else the first failure's exit code.
run_group() {
	local stage pid rc first=0 start=$SECONDS
	local -A name_of=()
	for stage in "$@"; do
		echo "==> stage $stage: started $(date -u +%H:%M:%SZ), side by side with the others of $(IFS=+; echo "$*")"
		(
			$make_cmd --no-print-directory "$stage" 2>&1 | sed -u "s/^/[$stage] /"
			exit "${PIPESTATUS[0]}"
		) &
		name_of[$!]="$stage"
	done
	while ((${#name_of[@]} > 0)); do
		wait -n -p pid "${!name_of[@]}"
		rc=$?
		record "${name_of[$pid]}" "$rc" "$((SECONDS - start))"
		unset "name_of[$pid]"
		if [[ $rc -ne 0 && $first -eq 0 ]]; then
			first=$rc
		fi
	done
	return "$first"
}

finish() {
	printf '==> %s\n' "${summary[@]}"
	if [[ $1 -ne 0 ]]; then
		exit "$1"
	fi
	echo "==> all stages passed in $((SECONDS - total_start))s"
}

for stage in "$@"; do
	if [[ $stage == *+* ]]; then
		IFS=+ read -ra group <<<"$stage"
		run_group "${group[@]}"
	else
		run_one "$stage"
	fi
	rc=$?
	if [[ $rc -ne 0 ]]; then
		finish "$rc"
	fi
done
finish 0
