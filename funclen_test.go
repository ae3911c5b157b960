package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxFunctionLines is the longest a shipping function may be: one screen,
// so that it can be read and changed in one view. A longer one is split by
// meaning (docs/development.md, "House rules").
const maxFunctionLines = 80

// maxMainLines keeps main.go the thin wiring that kube-state-metrics'
// main is: parse, log, signals, run, exit code.
const maxMainLines = 80

// TestFunctionsFitOnAScreen: no function of the binary's packages is
// longer than maxFunctionLines, counted from its func line to its closing
// brace.
func TestFunctionsFitOnAScreen(t *testing.T) {
	var long []string
	type measured struct {
		where string
		lines int
	}
	var all []measured
	for _, dir := range shippingDirs(t) {
		fset := token.NewFileSet()
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			for _, decl := range f.Decls {
				fn, ok := decl.(*ast.FuncDecl)
				if !ok || fn.Body == nil {
					continue
				}
				lines := fset.Position(fn.End()).Line - fset.Position(fn.Pos()).Line + 1
				where := fmt.Sprintf("%s:%d %s", file, fset.Position(fn.Pos()).Line, funcName(fn))
				all = append(all, measured{where, lines})
				if lines > maxFunctionLines {
					long = append(long, fmt.Sprintf("%s: %d lines", where, lines))
				}
			}
		}
	}
	// The longest five, for docs/development.md's figures (go test -v).
	sort.Slice(all, func(i, j int) bool { return all[i].lines > all[j].lines })
	for _, f := range all[:min(5, len(all))] {
		t.Logf("%4d lines  %s", f.lines, f.where)
	}
	sort.Strings(long)
	for _, l := range long {
		t.Errorf("longer than %d lines: %s", maxFunctionLines, l)
	}
}

func TestMainIsThin(t *testing.T) {
	data, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > maxMainLines {
		t.Errorf("main.go has %d lines, more than %d: move what is not wiring into a package", n, maxMainLines)
	}
}

func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	recv := fn.Recv.List[0].Type
	if star, ok := recv.(*ast.StarExpr); ok {
		recv = star.X
	}
	if idx, ok := recv.(*ast.IndexExpr); ok {
		recv = idx.X
	}
	if id, ok := recv.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

// shippingDirs are the directories of this module's packages that the
// binary links.
func shippingDirs(t *testing.T) []string {
	t.Helper()
	dirs := []string{"."}
	for _, p := range listPackages(t)[module].Deps {
		if rel, ok := strings.CutPrefix(p, module+"/"); ok {
			dirs = append(dirs, rel)
		}
	}
	return dirs
}
