package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/leader-elector/leader-elector"

// stdOnly forbids everything outside the standard library (and the package
// itself): a package every app, tool or test can import for nothing.
var stdOnly = []string{"*"}

// kubernetes is every Kubernetes module; klog is allowed where the logger
// is shared with the sidecar (see the rows that allow it).
var kubernetes = []string{"k8s.io/", "sigs.k8s.io/"}

// layers is docs/architecture.md's one-way rule as data: for each shipping
// package, what it must not depend on, directly or through another package
// (a trailing "/" forbids a whole tree; "*" everything but the standard
// library), and what is allowed nevertheless. Each row says why.
var layers = []struct {
	pkg, why string
	forbid   []string
	allow    []string
}{
	{pkg: "api", why: "the wire format an app imports: the standard library only", forbid: stdOnly},
	{pkg: "api/apitest", why: "the fake sidecar apps test against: the standard library and api only",
		forbid: stdOnly, allow: ours("api")},
	{pkg: "internal/textline", why: "a leaf every package may import", forbid: stdOnly},
	{pkg: "logging", why: "the logger setup the sidecar and run share: klog only",
		forbid: append(stdOnly, kubernetes...), allow: []string{"k8s.io/klog/v2", "github.com/go-logr/logr"}},
	{pkg: "leadership", why: "the state of one Lease that httpapi and apps read: the standard library only", forbid: stdOnly},
	{pkg: "ownership", why: "the state of a pod's partitions that httpapi reads: the standard library only", forbid: stdOnly},
	{pkg: "holderaddress", why: "the address annotation's format and rules: the Lease type, no client, none of ours",
		forbid: append(ours("election", "partition", "routing", "health", "httpapi", "app", "options"), "k8s.io/client-go/")},
	{pkg: "serverclock", why: "reads the API server's answers, is no client: the standard library and a clock",
		forbid: append(stdOnly, kubernetes...), allow: []string{"k8s.io/utils/clock"}},
	{pkg: "internal/quietlog", why: "a logr sink: logr only", forbid: stdOnly, allow: []string{"github.com/go-logr/logr"}},
	{pkg: "internal/racebackoff", why: "a back-off policy: the standard library and a clock", forbid: stdOnly, allow: []string{"k8s.io/utils/clock"}},
	{pkg: "leasetimings", why: "the timing rules: none of ours, so every entry point can apply them",
		forbid: ours("election", "partition", "leasecache", "app", "options", "httpapi", "notify", "routing", "health", "status", "supervisor")},
	{pkg: "leasecache", why: "the elector's Lease client knows no elector, mode or the binary",
		forbid: ours("election", "app", "options", "httpapi", "notify", "routing", "partition", "health", "status", "supervisor")},
	{pkg: "filelease", why: "serves the Lease API from a file; knows no elector, mode or the binary",
		forbid: ours("election", "leasecache", "app", "options", "httpapi", "notify", "routing", "partition", "health", "status", "supervisor")},
	{pkg: "leaseevents", why: "records the Lease's Events; knows no elector, mode or the binary",
		forbid: ours("election", "app", "options", "httpapi", "notify", "routing", "partition", "health", "status", "supervisor")},
	{pkg: "election", why: "the elector on one Lease knows nothing of HTTP, routing, partitions or the binary",
		forbid: ours("app", "options", "httpapi", "notify", "routing", "partition", "health", "status", "supervisor")},
	{pkg: "routing", why: "publishes the election; knows no other mode or the binary",
		forbid: ours("app", "options", "httpapi", "notify", "partition", "health", "status", "supervisor")},
	{pkg: "health", why: "gates the election; knows no other mode or the binary",
		forbid: ours("app", "options", "httpapi", "notify", "partition", "routing", "status", "supervisor")},
	{pkg: "partition", why: "a group of elections; knows no routing, HTTP or the binary",
		forbid: ours("app", "options", "httpapi", "notify", "routing", "health", "status", "supervisor")},
	{pkg: "httpapi", why: "answers the app over a view of the state (leadership, ownership); sends nothing, links no Kubernetes client, parses no flags",
		forbid: append(ours("app", "options", "notify", "routing", "health", "status", "supervisor", "election", "partition"), "k8s.io/client-go/")},
	{pkg: "proxy", why: "forwards connections by the leadership it reads; knows no elector, mode or the binary",
		forbid: ours("app", "options", "httpapi", "notify", "routing", "partition", "health", "status", "supervisor", "election")},
	{pkg: "notify", why: "the outbound notifier; not the composition", forbid: ours("app", "options", "status", "supervisor")},
	{pkg: "app", why: "the composition parses nothing", forbid: ours("options", "status", "supervisor")},
	{pkg: "options", why: "builds Configs and runs nothing of the subcommands", forbid: ours("status", "supervisor")},
	{pkg: "status", why: "a client of the local API alone: no Kubernetes client",
		forbid: append(ours("app", "options", "election"), kubernetes...), allow: []string{"k8s.io/klog/v2"}},
	{pkg: "supervisor", why: "a client of the local API alone: no Kubernetes client, klog for the sidecar's log format",
		forbid: append(ours("app", "options", "election"), kubernetes...), allow: []string{"k8s.io/klog/v2"}},
	{pkg: ".", why: "nothing that ships depends on a test-only component",
		forbid: ours("test/", "bench/", "examples/", "hack/", "internal/leasetest", "leadership/leadershiptest")},
}

// ours names packages of this module (a trailing "/" the tree under it).
func ours(pkgs ...string) []string {
	out := make([]string, len(pkgs))
	for i, p := range pkgs {
		out[i] = module + "/" + p
	}
	return out
}

// TestLayering: no shipping package depends on what its layer forbids. A
// new import that breaks the rule fails here with the row's reason.
func TestLayering(t *testing.T) {
	pkgs := listPackages(t)
	for _, l := range layers {
		t.Run(l.pkg, func(t *testing.T) {
			self := strings.TrimSuffix(module+"/"+l.pkg, "/.")
			p, ok := pkgs[self]
			if !ok {
				t.Fatalf("no package %s", self)
			}
			for _, name := range p.Deps {
				if dep := pkgs[name]; matches(dep, l.forbid) && !matches(dep, l.allow) {
					t.Errorf("%s depends on %s (%s)", l.pkg, name, l.why)
				}
			}
		})
	}
}

type listedPackage struct {
	ImportPath string
	Standard   bool
	// Deps are every package it imports, directly or not (tests aside).
	Deps []string
}

// listPackages lists the module's packages and all they depend on, by
// import path, in one go list (one per package took seconds).
func listPackages(t *testing.T) map[string]listedPackage {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-json=ImportPath,Standard,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	pkgs := map[string]listedPackage{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// matches reports whether p is named by one of the rules: "*" any package
// outside the standard library, "x/" the tree x/, else the package (and the
// packages under it).
func matches(p listedPackage, rules []string) bool {
	for _, r := range rules {
		switch {
		case r == "*":
			if !p.Standard {
				return true
			}
		case strings.HasSuffix(r, "/"):
			if strings.HasPrefix(p.ImportPath, r) {
				return true
			}
		case p.ImportPath == r || strings.HasPrefix(p.ImportPath, r+"/"):
			return true
		}
	}
	return false
}
