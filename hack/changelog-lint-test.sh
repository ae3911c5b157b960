#!/usr/bin/env bash
# Proves hack/changelog-lint.sh: it passes on the real CHANGELOG.md and
# VERSION, and fails on copies broken one rule at a time (each edit is
# checked to have changed the copy, so a case cannot pass vacuously).
# Usage: hack/changelog-lint-test.sh
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lint="$root/hack/changelog-lint.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

failures=0
if ! out="$(bash "$lint" "$root/CHANGELOG.md" "$root/VERSION" 2>&1)"; then
	echo "FAIL: the real CHANGELOG.md is refused:"
	echo "$out"
	failures=$((failures + 1))
fi

newest="$(grep -m1 -E '^## \[[0-9]+\.[0-9]+\.[0-9]+\]' "$root/CHANGELOG.md" | sed -E 's/^## \[([^]]+)\].*/\1/')"
second="$(grep -E '^## \[[0-9]+\.[0-9]+\.[0-9]+\]' "$root/CHANGELOG.md" | sed -n 2p)"
# The second release's heading as a sed pattern ([, ] and . escaped).
second_re="$(printf '%s' "$second" | sed 's/[].[]/\\&/g')"

# expect_refused NAME WANT SED-SCRIPT [VERSION]: the copy edited by
# SED-SCRIPT (and a VERSION file saying VERSION, default the real one) must be
# refused with a message containing WANT.
expect_refused() {
	local name="$1" want="$2" script="$3" version="${4:-$(cat "$root/VERSION")}"
	local copy="$tmp/$name.md" vfile="$tmp/$name.VERSION"
	if ! sed -E "$script" "$root/CHANGELOG.md" >"$copy"; then
		echo "FAIL: $name: the edit does not apply"
		failures=$((failures + 1))
		return
	fi
	echo "$version" >"$vfile"
	if cmp -s "$copy" "$root/CHANGELOG.md" && [[ "$version" == "$(cat "$root/VERSION")" ]]; then
		echo "FAIL: $name: the edit changed nothing"
		failures=$((failures + 1))
		return
	fi
	local out
	if out="$(bash "$lint" "$copy" "$vfile" 2>&1)"; then
		echo "FAIL: $name: accepted"
		failures=$((failures + 1))
	elif [[ "$out" != *"$want"* ]]; then
		echo "FAIL: $name: refused without \"$want\":"
		echo "$out"
		failures=$((failures + 1))
	fi
}

expect_refused unbracketed 'the first section must be "## [Unreleased]"' 's/^## \[Unreleased\]$/## Unreleased/'
expect_refused no-date 'must read "## [X.Y.Z] - YYYY-MM-DD"' "s/^## \\[$newest\\] - .*/## [$newest]/"
expect_refused version-file 'the VERSION file says 9.9.9' 's/^$//' 9.9.9
expect_refused order 'is not below the one above it' "s/^$second_re\$/## [$newest] - 2026-01-01/"
expect_refused dates 'must not increase downward' "s/^$second_re\$/${second% - *} - 2999-12-31/"
expect_refused left-behind 'mentions "unreleased"' "/^## \\[$newest\\]/a - Unreleased: a note left behind."
expect_refused issue-number '"(issue N)" reference' 's/^### Upgrading$/### Upgrading (issue 17)/'
expect_refused empty-release 'has no entries' "/^## \\[$newest\\]/,/^## \\[/{/^## /!d}"
expect_refused unreleased-twice 'must be the first section, and only once' "/^## \\[$newest\\]/i ## [Unreleased]\\n"

if [[ $failures -ne 0 ]]; then
	echo "changelog-lint-test: $failures case(s) failed"
	exit 1
fi
echo "changelog-lint-test: ok (the real file passes, 9 broken copies are refused)"
