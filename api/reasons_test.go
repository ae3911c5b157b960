package api

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestChangeReasonsInTheDocs: every place that lists the vocabulary of
// Change.Reason for users lists exactly ChangeReasons, so that a new reason
// fails here until each of them names it. (The elector's own list is
// checked against ChangeReasons in package app, which imports both.)
func TestChangeReasonsInTheDocs(t *testing.T) {
	want := ChangeReasons()
	tableRow := regexp.MustCompile("(?m)^\\| `([a-z-]+)` \\|")
	for _, c := range []struct {
		file, from, to string
		// table: the region is a table whose first column is the reason,
		// compared exactly; otherwise the region must name every reason.
		table bool
	}{
		{file: "../docs/api.md", from: "| reason | meaning |", to: "\n\n", table: true},
		{file: "../docs/operations.md", from: "| `reason` | with | what happened |", to: "\n\n", table: true},
		{file: "../docs/operations.md", from: "| `leader_elector_transitions_total` |", to: "\n"},
		{file: "../deploy/grafana/leader-elector-dashboard.json", from: "changes of leadership per 5 minutes, by reason:", to: "\n"},
		{file: "api.go", from: "// Reason is one of ChangeReasons:", to: "Reason string"},
	} {
		region := section(t, c.file, c.from, c.to)
		if c.table {
			var got []string
			for _, m := range tableRow.FindAllStringSubmatch(region, -1) {
				got = append(got, m[1])
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: the table after %q lists %v, want %v", c.file, c.from, got, want)
			}
			continue
		}
		for _, r := range want {
			if !regexp.MustCompile(`\b` + regexp.QuoteMeta(r) + `\b`).MatchString(region) {
				t.Errorf("%s: the text after %q does not name %q", c.file, c.from, r)
			}
		}
	}
}

// section returns the text of file after the first from, up to the first
// to after it (a table's end: a blank line).
func section(t *testing.T, file, from, to string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, from)
	if i < 0 {
		t.Fatalf("%s does not contain %q", file, from)
	}
	text = text[i+len(from):]
	if j := strings.Index(text, to); j >= 0 {
		text = text[:j]
	}
	return text
}
