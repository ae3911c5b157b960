// Package snippets finds the code blocks of the user documentation
// (README.md, docs/*.md, the chart's README) and the marker each must carry,
// so that tests can run every snippet a user is told to copy and fail on one
// that nobody runs.
//
// A fenced code block is preceded, as the block right before it, by one of
//
//	<!-- test: NAME -->         test/e2e's TestDocSnippets runs it (handler NAME)
//	<!-- untested: REASON -->   not a snippet to copy (output sample, diagram), and why
//
// Blocks marked with the same NAME must have the same text: one snippet
// shown in two places is tested once.
//
// It is test support: nothing that ships imports it.
package snippets

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/text"
)

// Block is one fenced code block of a markdown file.
type Block struct {
	File     string // relative to the repository
	Line     int    // 1-based line of the block's first content line
	Info     string // the fence's info string ("sh", "yaml", …)
	Text     string
	Test     string // the handler's name from <!-- test: NAME -->
	Untested string // the reason from <!-- untested: REASON -->
}

func (b Block) String() string { return fmt.Sprintf("%s:%d (```%s)", b.File, b.Line, b.Info) }

// DocFiles are the markdown files users read, relative to root.
func DocFiles(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files := []string{"README.md", filepath.Join("charts", "leader-elector", "README.md")}
	for _, d := range docs {
		rel, err := filepath.Rel(root, d)
		if err != nil {
			return nil, err
		}
		files = append(files, rel)
	}
	slices.Sort(files)
	return files, nil
}

var marker = regexp.MustCompile(`^<!--\s*(test|untested):\s*(.*?)\s*-->\s*$`)

// Extract returns every fenced code block of the files (relative to root),
// with its marker if it has one. A malformed marker is an error.
//
// goldmark (CommonMark) finds the blocks: fences may be indented, in lists,
// of backticks or tildes, and a line scan would misjudge some of them.
func Extract(root string, files []string) ([]Block, error) {
	var blocks []Block
	md := goldmark.New()
	for _, f := range files {
		src, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		doc := md.Parser().Parse(text.NewReader(src))
		var walkErr error
		err = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			fenced, ok := n.(*ast.FencedCodeBlock)
			if !entering || !ok {
				return ast.WalkContinue, nil
			}
			b := Block{File: f, Text: string(linesOf(fenced.Lines(), src))}
			if fenced.Info != nil {
				b.Info = strings.Fields(string(fenced.Info.Segment.Value(src)) + " ")[0]
			}
			if fenced.Lines().Len() > 0 {
				b.Line = bytes.Count(src[:fenced.Lines().At(0).Start], []byte("\n")) + 1
			} else {
				b.Line = bytes.Count(src[:lineStart(fenced, src)], []byte("\n")) + 1
			}
			if prev, ok := fenced.PreviousSibling().(*ast.HTMLBlock); ok {
				comment := strings.TrimSpace(string(linesOf(prev.Lines(), src)))
				if m := marker.FindStringSubmatch(comment); m != nil {
					if m[2] == "" {
						walkErr = fmt.Errorf("%s: marker %q without a name or reason", b, comment)
						return ast.WalkStop, nil
					}
					if m[1] == "test" {
						b.Test = m[2]
					} else {
						b.Untested = m[2]
					}
				} else if strings.Contains(comment, "test:") || strings.Contains(comment, "untested:") {
					walkErr = fmt.Errorf("%s: malformed marker %q, want <!-- test: NAME --> or <!-- untested: REASON --> alone", b, comment)
					return ast.WalkStop, nil
				}
			}
			blocks = append(blocks, b)
			return ast.WalkContinue, nil
		})
		if err == nil {
			err = walkErr
		}
		if err != nil {
			return nil, err
		}
	}
	return blocks, nil
}

func linesOf(lines *text.Segments, src []byte) []byte {
	var buf bytes.Buffer
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		buf.Write(seg.Value(src))
	}
	return buf.Bytes()
}

// lineStart is an offset inside an empty block's paragraph, for its line.
func lineStart(n ast.Node, src []byte) int {
	for p := n.PreviousSibling(); p != nil; p = p.PreviousSibling() {
		if l := p.Lines(); l != nil && l.Len() > 0 {
			return l.At(l.Len() - 1).Stop
		}
	}
	return 0
}

// Check returns a problem for every block without a marker, and for every
// test name whose blocks differ.
func Check(blocks []Block) []string {
	var problems []string
	byName := map[string]Block{}
	for _, b := range blocks {
		switch {
		case b.Test == "" && b.Untested == "":
			problems = append(problems, fmt.Sprintf("%s has no marker: put <!-- test: NAME --> (and a handler in test/e2e/docs_test.go) or <!-- untested: REASON --> right before it", b))
		case b.Test != "":
			if first, ok := byName[b.Test]; ok && first.Text != b.Text {
				problems = append(problems, fmt.Sprintf("%s and %s are both marked test: %s but differ: give them different names", first, b, b.Test))
			} else if !ok {
				byName[b.Test] = b
			}
		}
	}
	return problems
}

// Tested returns one block per test name, in the order they first appear.
func Tested(blocks []Block) []Block {
	var out []Block
	seen := map[string]bool{}
	for _, b := range blocks {
		if b.Test != "" && !seen[b.Test] {
			seen[b.Test] = true
			out = append(out, b)
		}
	}
	return out
}
