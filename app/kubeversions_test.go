package app

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSupportedRangeCopies: the supported range is written once, in
// kube-versions.txt; the places that must repeat it (the chart renders
// without this module, the docs are prose) are checked against it here, so
// that a new release in the file fails this test until each copy follows.
func TestSupportedRangeCopies(t *testing.T) {
	var releases []string
	for _, line := range strings.Split(testedReleases, "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			releases = append(releases, strings.TrimPrefix(line, "v"))
		}
	}
	oldest, newest := oldestSupported.String(), newestTested.String()
	pinned := "v" + releases[len(releases)-1]
	run := strings.Join(releases[:len(releases)-1], ", ") + " and " + releases[len(releases)-1]
	for _, c := range []struct {
		file string
		want []string
	}{
		{"charts/leader-elector/templates/_helpers.tpl", []string{
			fmt.Sprintf(`semverCompare "<%s-0" .Capabilities.KubeVersion.Version`, oldest),
			fmt.Sprintf("leader-elector supports Kubernetes %s or later", oldest),
		}},
		{"docs/operations.md", []string{
			fmt.Sprintf("**Kubernetes %s to %s**", oldest, newest),
			"The releases run are\n" + run + " (the pinned one)",
			fmt.Sprintf("The chart refuses to render for a release older than %s.", oldest),
			fmt.Sprintf("supported=\"%s–%s\"", oldest, newest),
		}},
		{"test/tools/kube/go.mod", []string{"require k8s.io/kubernetes " + pinned + "\n"}},
		{"Makefile", []string{"KUBE_VERSIONS ?= $(shell sed -e '/^#/d' app/kube-versions.txt)"}},
	} {
		data, err := os.ReadFile(filepath.Join("..", c.file))
		if err != nil {
			t.Fatal(err)
		}
		// Prose wraps anywhere: compare with runs of white space as one.
		text := space.ReplaceAllString(string(data), " ")
		for _, want := range c.want {
			if !strings.Contains(text, space.ReplaceAllString(want, " ")) {
				t.Errorf("%s does not say %q (app/kube-versions.txt: %s to %s, releases %s)", c.file, want, oldest, newest, run)
			}
		}
	}
}

var space = regexp.MustCompile(`\s+`)
