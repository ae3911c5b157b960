#!/usr/bin/env bash
# Runs make targets as stages, in order: prints when each starts and how long
# it took, stops at the first that fails, and ends with one line per stage,
# so that a CI log says at a glance which stage failed and what each cost.
#
# A STAGE of the form a+b runs the targets a and b side by side, each line
# of their output prefixed with "[a] " or "[b] ": the e2e and node stages
# spend most of their time waiting on lease timings and on the node's
# components (a sequential run kept about half of the two cores busy), so
# together they take little more than the longer one alone. Each prints its
# own time when it ends; the group fails if either does, once both ended (the
# other one's results stay in the log, and a node run cut short would leave
# the machine to clean up).
#
# PREBUILD, if set, is a make target started in the background beside the
# first stage, its output in prebuild.out (or PREBUILD_LOG); the second
# stage starts only once it has ended, and a failure of it fails the run
# with its last lines. If the first stage fails, the prebuild is stopped.
# It is for builds the later stages need and the first does not, to fill
# the time the first stage spends waiting on its tests; on a cold 2-core
# machine, where every build is CPU-bound, that gained nothing measurable
# (docs/development.md), so make test leaves it unset.
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

prebuild_pid=""
prebuild_log="${PREBUILD_LOG:-prebuild.out}"

# start_prebuild: starts PREBUILD, if set, in a session of its own (so that
# stop_prebuild reaches the builds it started too).
start_prebuild() {
	[[ -n ${PREBUILD:-} ]] || return 0
	echo "==> prebuild (make $PREBUILD): started $(date -u +%H:%M:%SZ), beside the first stage; its output in $prebuild_log"
	prebuild_start=$SECONDS
	setsid $make_cmd --no-print-directory $PREBUILD >"$prebuild_log" 2>&1 </dev/null &
	prebuild_pid=$!
}

# wait_prebuild: waits for the prebuild to end; returns its exit code.
wait_prebuild() {
	[[ -n $prebuild_pid ]] || return 0
	local rc=0
	if kill -0 "$prebuild_pid" 2>/dev/null; then
		echo "==> waiting for the prebuild (make $PREBUILD, started $((SECONDS - prebuild_start))s ago)"
	fi
	wait "$prebuild_pid" || rc=$?
	prebuild_pid=""
	record "prebuild" "$rc" "$((SECONDS - prebuild_start))"
	if [[ $rc -ne 0 ]]; then
		echo "==> the prebuild (make $PREBUILD) failed; the last lines of $prebuild_log:"
		tail -n 40 "$prebuild_log"
	fi
	return "$rc"
}

stop_prebuild() {
	[[ -n $prebuild_pid ]] || return 0
	kill -- "-$prebuild_pid" 2>/dev/null
	wait "$prebuild_pid" 2>/dev/null
	prebuild_pid=""
	echo "==> the prebuild (make $PREBUILD) stopped"
}

finish() {
	if [[ $1 -eq 0 ]]; then
		wait_prebuild || finish "$?"
	else
		stop_prebuild
	fi
	printf '==> %s\n' "${summary[@]}"
	if [[ $1 -ne 0 ]]; then
		exit "$1"
	fi
	echo "==> all stages passed in $((SECONDS - total_start))s"
}

start_prebuild
first=1
for stage in "$@"; do
	if [[ $first -eq 0 ]]; then
		wait_prebuild || finish "$?"
	fi
	first=0
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
