package snippets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leader-elector/leader-elector/test/harness"
)

// TestDocsMarked: every code block of the user docs says whether it is
// tested, so a new snippet cannot go in untested unnoticed. (test/e2e's
// TestDocSnippets runs the tested ones.)
func TestDocsMarked(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := Extract(root, files)
	if err != nil {
		t.Fatal(err)
	}
	if len(Tested(blocks)) == 0 {
		t.Fatalf("no tested block in %v", files)
	}
	for _, p := range Check(blocks) {
		t.Error(p)
	}
}

func TestExtractAndCheck(t *testing.T) {
	dir := t.TempDir()
	md := "# t\n\n<!-- test: a -->\n```sh\necho a\n```\n\n" +
		"- item\n\n  <!-- untested: output -->\n  ```console\n  $ x\n  ```\n\n" +
		"```yaml\nk: v\n```\n\n" +
		"<!-- test: a -->\n~~~sh\necho b\n~~~\n"
	if err := os.WriteFile(filepath.Join(dir, "x.md"), []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := Extract(dir, []string{"x.md"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{File: "x.md", Line: 5, Info: "sh", Text: "echo a\n", Test: "a"},
		{File: "x.md", Line: 12, Info: "console", Text: "$ x\n", Untested: "output"},
		{File: "x.md", Line: 16, Info: "yaml", Text: "k: v\n"},
		{File: "x.md", Line: 21, Info: "sh", Text: "echo b\n", Test: "a"},
	}
	if len(blocks) != len(want) {
		t.Fatalf("got %d blocks %+v, want %+v", len(blocks), blocks, want)
	}
	for i := range want {
		if blocks[i] != want[i] {
			t.Errorf("block %d: got %+v, want %+v", i, blocks[i], want[i])
		}
	}
	problems := Check(blocks)
	if len(problems) != 2 || !strings.Contains(problems[0], "x.md:16 (```yaml) has no marker") || !strings.Contains(problems[1], "differ") {
		t.Errorf("problems: %q, want the unmarked block at line 16 and the two different blocks named a", problems)
	}

	bad := filepath.Join(dir, "bad.md")
	if err := os.WriteFile(bad, []byte("<!-- test: -->\n```sh\nx\n```\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Extract(dir, []string{"bad.md"}); err == nil {
		t.Error("a marker without a name was accepted")
	}
}
