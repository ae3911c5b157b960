#!/usr/bin/env bash
# failure-context.sh FILE: prints, for each failed test in a `go test -v`
# output, the last lines that test logged before its "--- FAIL" line.
#
# The make targets filter the verbose output down to one line per test; when
# a test fails, its own messages (t.Errorf, t.Fatalf) are what a reader of a
# CI log needs, and the whole file is too long to print.
set -euo pipefail
file="$1"
keep="${FAILURE_CONTEXT_LINES:-40}"
awk -v keep="$keep" '
# -v output names the running test in headers when it switches between tests.
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^[[:space:]]*--- FAIL: / {
	name = $3
	n = count[name]
	# A parent whose subtests failed logged nothing of its own.
	if (n == 0) next
	printf "\n----- last lines of %s -----\n", name
	from = n > keep ? n - keep + 1 : 1
	for (i = from; i <= n; i++) print lines[name, i]
	next
}
cur != "" { lines[cur, ++count[cur]] = $0 }
' "$file"
