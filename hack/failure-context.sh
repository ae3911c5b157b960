#!/usr/bin/env bash
# failure-context.sh FILE: prints, for each failed test in a `go test -v`
# output, the messages it reported (t.Errorf, t.Fatalf, t.Logf: the lines
# that start with file.go:line) and the last lines it logged before its
# "--- FAIL" line.
#
# The make targets filter the verbose output down to one line per test; when
# a test fails, its own messages are what a reader of a CI log needs, and the
# whole file is too long to print. Both parts are kept, because a test that
# dumps its processes' logs on failure does so after its failure message.
set -euo pipefail
file="$1"
keep="${FAILURE_CONTEXT_LINES:-40}"
keepmsgs="${FAILURE_CONTEXT_MESSAGES:-20}"
awk -v keep="$keep" -v keepmsgs="$keepmsgs" '
# -v output names the running test in headers when it switches between tests.
/^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; next }
/^[[:space:]]*--- FAIL: / {
	name = $3
	n = count[name]
	# A parent whose subtests failed logged nothing of its own.
	if (n == 0) next
	m = nmsgs[name]
	if (m > 0) {
		printf "\n----- messages of %s -----\n", name
		from = m > keepmsgs ? m - keepmsgs + 1 : 1
		for (i = from; i <= m; i++) print msgs[name, i]
	}
	printf "\n----- last lines of %s -----\n", name
	from = n > keep ? n - keep + 1 : 1
	for (i = from; i <= n; i++) print lines[name, i]
	next
}
cur != "" {
	lines[cur, ++count[cur]] = $0
	# The first line of a message the test reported (go test indents it by
	# four spaces); the lines of a multi-line message are indented deeper.
	if ($0 ~ /^    [A-Za-z0-9_.-]+\.go:[0-9]+: /) msgs[cur, ++nmsgs[cur]] = $0
}
' "$file"
