#!/usr/bin/env bash
# Checks CHANGELOG.md's shape (Keep a Changelog 1.1.0), so that a release
# cut by hand cannot leave the file in a state an upgrader misreads:
#   - the first section is "## [Unreleased]", then released versions, each
#     "## [X.Y.Z] - YYYY-MM-DD", in strictly decreasing version order, with
#     dates that never increase downward;
#   - the newest released version is the one in the VERSION file (the one
#     source of the version, see the Makefile);
#   - no released section mentions "unreleased" (an entry left behind when
#     the section was cut);
#   - no "(issue N)" reference: users cannot open the project's issues;
#   - every released section has at least one entry.
# Usage: hack/changelog-lint.sh [CHANGELOG] [VERSION-file]
# (defaults: CHANGELOG.md and VERSION next to the Makefile). Exit 1 and one
# line per finding, as file:line: message, when the file breaks a rule.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
changelog="${1:-$root/CHANGELOG.md}"
version_file="${2:-$root/VERSION}"

if [[ ! -r "$changelog" ]]; then
	echo "changelog-lint: cannot read $changelog" >&2
	exit 1
fi
if [[ ! -r "$version_file" ]]; then
	echo "changelog-lint: cannot read $version_file" >&2
	exit 1
fi
version="$(tr -d '[:space:]' <"$version_file")"

# awk does the checks in one pass; versions are compared numerically, part by
# part (X.Y.Z without pre-release: the project releases none).
awk -v file="$changelog" -v version="$version" '
function fail(line, msg) {
	printf "%s:%d: %s\n", file, line, msg
	failed = 1
}
# cmp returns <0, 0 or >0 as semver a is below, equal to or above b.
function cmp(a, b,    pa, pb, i) {
	split(a, pa, ".")
	split(b, pb, ".")
	for (i = 1; i <= 3; i++) {
		if (pa[i] + 0 != pb[i] + 0) return pa[i] - pb[i]
	}
	return 0
}
function close_section() {
	if (released && entries == 0) fail(section_line, "released section [" section_version "] has no entries")
}
BEGIN { sections = 0; released = 0; entries = 0; in_fence = 0 }
/^```/ { in_fence = !in_fence }
/\([Ii]ssues? #?[0-9]+/ { fail(NR, "an \"(issue N)\" reference: users cannot open the project'\''s issues; say what changed instead") }
/^## / && !in_fence {
	close_section()
	sections++
	section_line = NR
	entries = 0
	if (sections == 1) {
		if ($0 != "## [Unreleased]") fail(NR, "the first section must be \"## [Unreleased]\", found \"" $0 "\"")
		released = 0
		next
	}
	if ($0 == "## [Unreleased]") {
		fail(NR, "\"## [Unreleased]\" must be the first section, and only once")
		released = 0
		next
	}
	if (!match($0, /^## \[[0-9]+\.[0-9]+\.[0-9]+\] - [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$/)) {
		fail(NR, "a released section must read \"## [X.Y.Z] - YYYY-MM-DD\", found \"" $0 "\"")
		released = 1
		section_version = "?"
		next
	}
	released = 1
	v = $0; sub(/^## \[/, "", v); sub(/\].*$/, "", v)
	d = $0; sub(/^.* - /, "", d)
	section_version = v
	if (newest == "") {
		newest = v
		if (v != version) fail(NR, "the newest released version is " v ", the VERSION file says " version)
	} else {
		if (cmp(v, prev_version) >= 0) fail(NR, "version " v " is not below the one above it (" prev_version "): newest first")
		if (d > prev_date) fail(NR, "date " d " of " v " is after " prev_date " of " prev_version ": dates must not increase downward")
	}
	prev_version = v
	prev_date = d
	next
}
{
	if (released && /^[ \t]*[-*] /) entries++
	if (released && tolower($0) ~ /unreleased/) fail(NR, "released section [" section_version "] mentions \"unreleased\": an entry left behind when it was cut?")
}
END {
	close_section()
	if (sections == 0) fail(NR, "no sections: want \"## [Unreleased]\" and the released versions")
	else if (newest == "") fail(NR, "no released section: want one for VERSION " version)
	exit failed
}
' "$changelog"
