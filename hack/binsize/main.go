// Command binsize prints where the bytes of the sidecar's binary go, side by
// side with the client-go baseline of the benchmarks (bench/baseline), as the
// markdown table docs/performance.md shows (`make size`).
//
// Each program is built twice as the release is (-trimpath, CGO off): once
// stripped (-s -w), whose file size is the figure that ships, and once with
// its symbol table, whose symbols are summed per package group. Only symbols
// in sections that occupy the file count (text, rodata, data): bss, such as
// the FIPS DRBG's 32 MiB buffer, costs nothing on disk. What no symbol names
// (the function tables of .gopclntab get a row of their own; type links,
// the ELF and build-info headers, alignment) is the row "unattributed", so
// that every column adds up to the stripped file.
//
// Hand-written on the standard library's debug/elf: the size analysers on the
// Go module proxy print their own report formats, not this before/after
// comparison of two programs, and would be a dependency of the repository for
// forty lines of summing.
package main

import (
	"cmp"
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

const ourModule = "github.com/leader-elector/leader-elector"

func main() {
	top := flag.Int("top", 25, "rows of package groups to show (the rest is summed as \"other\")")
	flag.Parse()
	if err := run(*top); err != nil {
		fmt.Fprintln(os.Stderr, "binsize:", err)
		os.Exit(1)
	}
}

type program struct {
	name, pkg string
	stripped  int64
	groups    map[string]int64
}

func run(top int) error {
	dir, err := os.MkdirTemp("", "binsize-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	progs := []*program{{name: "baseline (client-go)", pkg: "./bench/baseline"}, {name: "leader-elector", pkg: "."}}
	for i, p := range progs {
		stripped := filepath.Join(dir, fmt.Sprintf("%d-stripped", i))
		full := filepath.Join(dir, fmt.Sprintf("%d-full", i))
		if err := build(p.pkg, stripped, "-s -w"); err != nil {
			return err
		}
		if err := build(p.pkg, full, ""); err != nil {
			return err
		}
		st, err := os.Stat(stripped)
		if err != nil {
			return err
		}
		p.stripped = st.Size()
		if p.groups, err = groups(full); err != nil {
			return err
		}
		if p.groups[pclntab], err = sectionSize(stripped, ".gopclntab"); err != nil {
			return err
		}
		var attributed int64
		for _, n := range p.groups {
			attributed += n
		}
		p.groups["unattributed (type links, headers, padding)"] = p.stripped - attributed
	}
	print(progs, top)
	return nil
}

// pclntab names the row of the function tables (.gopclntab: names, line
// and stack maps of every function), which no symbol covers; they grow with
// the code.
const pclntab = "function tables (.gopclntab)"

func sectionSize(path, name string) (int64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	s := f.Section(name)
	if s == nil {
		return 0, fmt.Errorf("%s: no section %s", path, name)
	}
	return int64(s.Size), nil
}

func build(pkg, out, ldflags string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w", pkg, err)
	}
	return nil
}

// groups sums the sizes of the file-backed symbols of the binary at path by
// package group (see group).
func groups(path string) (map[string]int64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]int64{}
	for _, s := range syms {
		if int(s.Section) <= 0 || int(s.Section) >= len(f.Sections) || f.Sections[s.Section].Type == elf.SHT_NOBITS {
			continue
		}
		out[group(s.Name)] += int64(s.Size)
	}
	return out, nil
}

// group names the package group a symbol belongs to: each package of this
// module; each API group of k8s.io/api and each directory of client-go (so
// that the typed clients, informers and listers show apart); the top
// directory of the standard library; otherwise the module-like first three
// path elements.
func group(sym string) string {
	name := sym
	for _, prefix := range []string{"type:", "go:itab.", "*"} {
		name = strings.TrimPrefix(name, prefix)
	}
	if i := strings.IndexAny(name, "[ "); i >= 0 {
		name = name[:i]
	}
	pkg := name
	if i := strings.Index(name[strings.LastIndex(name, "/")+1:], "."); i >= 0 {
		pkg = name[:strings.LastIndex(name, "/")+1+i]
	}
	parts := strings.Split(pkg, "/")
	switch {
	case strings.HasPrefix(sym, "go:") && !strings.HasPrefix(sym, "go:itab."):
		return "runtime metadata (go:func.*, go:string.*)"
	case pkg == ourModule || strings.HasPrefix(pkg, ourModule+"/"):
		return "ours: " + strings.TrimPrefix(strings.TrimPrefix(pkg, ourModule), "/")
	case parts[0] == "k8s.io" && len(parts) >= 3 && (parts[1] == "api" || parts[1] == "client-go"):
		if parts[1] == "client-go" && parts[2] == "kubernetes" && len(parts) >= 4 {
			return "k8s.io/client-go/kubernetes/" + parts[3]
		}
		return strings.Join(parts[:3], "/")
	case !strings.Contains(parts[0], "."):
		return "std: " + parts[0]
	case len(parts) > 3:
		return strings.Join(parts[:3], "/")
	}
	return pkg
}

func print(progs []*program, top int) {
	base, ours := progs[0], progs[1]
	keys := map[string]bool{}
	for _, p := range progs {
		for k := range p.groups {
			keys[k] = true
		}
	}
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(ours.groups[b]+base.groups[b], ours.groups[a]+base.groups[a]), strings.Compare(a, b))
	})
	fmt.Printf("| package group | %s | %s | difference |\n|---|---:|---:|---:|\n", base.name, ours.name)
	row := func(name string, b, o int64) {
		fmt.Printf("| %s | %s | %s | %s |\n", name, mb(b), mb(o), signed(o-b))
	}
	var otherB, otherO int64
	for i, k := range names {
		if i < top {
			row(k, base.groups[k], ours.groups[k])
			continue
		}
		otherB += base.groups[k]
		otherO += ours.groups[k]
	}
	row(fmt.Sprintf("other (%d groups)", max(0, len(names)-top)), otherB, otherO)
	row("**stripped binary** (-s -w)", base.stripped, ours.stripped)

	// The same bytes by where they come from.
	byOrigin := map[string][2]int64{}
	for _, k := range names {
		o := byOrigin[origin(k)]
		byOrigin[origin(k)] = [2]int64{o[0] + base.groups[k], o[1] + ours.groups[k]}
	}
	origins := make([]string, 0, len(byOrigin))
	for k := range byOrigin {
		origins = append(origins, k)
	}
	slices.SortFunc(origins, func(a, b string) int { return cmp.Compare(byOrigin[b][1], byOrigin[a][1]) })
	fmt.Printf("\n| origin | %s | %s | difference |\n|---|---:|---:|---:|\n", base.name, ours.name)
	for _, k := range origins {
		row(k, byOrigin[k][0], byOrigin[k][1])
	}
}

// origin sums package groups by where they come from.
func origin(group string) string {
	switch {
	case group == pclntab || strings.HasPrefix(group, "unattributed") || strings.HasPrefix(group, "runtime metadata"):
		return "tables and metadata (function tables, type links, strings)"
	case strings.HasPrefix(group, "k8s.io/api/"):
		return "k8s.io/api: every API group (client-go's scheme registers them all)"
	case strings.HasPrefix(group, "k8s.io/client-go"), strings.HasPrefix(group, "k8s.io/apimachinery"):
		return "client-go and apimachinery"
	case strings.HasPrefix(group, "std: "):
		return "Go standard library"
	case strings.HasPrefix(group, "ours: "), strings.Contains(group, ourModule):
		return "this repository's packages"
	case strings.Contains(group, "prometheus"), strings.HasPrefix(group, "github.com/beorn7"), strings.HasPrefix(group, "github.com/cespare"):
		return "Prometheus client"
	}
	return "other modules"
}

func mb(n int64) string { return fmt.Sprintf("%.2f MB", float64(n)/1e6) }

func signed(n int64) string {
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%+.2f MB", float64(n)/1e6)
}
