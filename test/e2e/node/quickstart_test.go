//go:build integration

package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/packaging"
	"github.com/leader-elector/leader-elector/test/snippets"
)

// quickstartImage matches the image line of the README's overlay, which
// names the image a user released; the test gives it the node's image, as
// the user gives theirs.
var quickstartImage = regexp.MustCompile(`newName: [^,]+, newTag: [^}]+}`)

// TestQuickstart runs the README's quickstart (the block marked
// kubectl-example) as a user does, on the real node with the real kubectl,
// in a git checkout of the files it uses, and checks what its commands
// print, not only that they run: the Lease's holder is a pod of the
// example, the Service's ready endpoints are that pod alone, the sidecar
// the user asks answers about that holder, and the checkout is as clean as
// before (the overlay lives where git ignores it). TestDocSnippets runs
// the same block on an API server without a node, where no endpoint is
// ever ready.
func TestQuickstart(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	apply, checks := quickstartCommands(t, root)
	checkout := gitCheckout(t, root, "manifests", ".gitignore")

	// The objects the overlay applies, tracked so that the test waits for
	// the leader as a user would and removes them at its end.
	objs, err := packaging.KustomizeExampleWithImage(context.Background(), "example", nodeImage)
	if err != nil {
		t.Fatal(err)
	}
	d := track(t, "quickstart", objs)
	runShell(t, checkout, quickstartImage.ReplaceAllString(apply, "newName: "+nodeImageRepository+", newTag: "+nodeImageTag+"}"))
	leader := d.servingLeader(t).Name

	var holder string
	for _, c := range checks {
		out := strings.TrimSpace(runShell(t, checkout, c))
		switch {
		case strings.Contains(c, "get lease"):
			holder = out
			if holder != leader {
				t.Errorf("%s printed %q, want the leading pod %q", c, out, leader)
			}
		case strings.Contains(c, "get endpointslices"):
			if lines := strings.Fields(out); !slices.Equal(lines, []string{leader}) {
				t.Errorf("%s printed %q, want the leader's pod %q alone", c, lines, leader)
			}
		case strings.Contains(c, "/leader"):
			var answer struct {
				Holder   string `json:"holder"`
				IsLeader *bool  `json:"isLeader"`
			}
			if err := json.Unmarshal([]byte(out), &answer); err != nil || answer.IsLeader == nil || answer.Holder != leader {
				t.Errorf("%s printed %q, want the sidecar's answer naming holder %q (%v)", c, out, leader, err)
			}
		case strings.Contains(c, " logs "):
			if out == "" {
				t.Errorf("%s printed nothing", c)
			}
		default:
			t.Errorf("a quickstart command this test does not check: %s (add what its output must show)", c)
		}
	}
	if holder == "" {
		t.Error("the quickstart no longer shows the Lease's holder")
	}
	if out := git(t, checkout, "status", "--porcelain"); out != "" {
		t.Errorf("the quickstart left the checkout changed:\n%s", out)
	}
}

// quickstartCommands splits the README's kubectl-example block into the
// commands up to its `kubectl apply` and the checks after it, each printed
// back as one shell command.
func quickstartCommands(t *testing.T, root string) (apply string, checks []string) {
	t.Helper()
	blocks, err := snippets.Extract(root, []string{"README.md"})
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(blocks, func(b snippets.Block) bool { return b.Test == "kubectl-example" })
	if i < 0 {
		t.Fatal("README.md has no block marked <!-- test: kubectl-example -->")
	}
	f, err := syntax.NewParser().Parse(strings.NewReader(blocks[i].Text), blocks[i].File)
	if err != nil {
		t.Fatalf("%s: %v", blocks[i], err)
	}
	var head bytes.Buffer
	applied := false
	for _, stmt := range f.Stmts {
		var b bytes.Buffer
		if err := syntax.NewPrinter().Print(&b, stmt); err != nil {
			t.Fatal(err)
		}
		if applied {
			checks = append(checks, b.String())
			continue
		}
		head.Write(b.Bytes())
		head.WriteByte('\n')
		applied = strings.HasPrefix(b.String(), "kubectl apply")
	}
	if !applied || len(checks) == 0 {
		t.Fatalf("%s: no `kubectl apply` followed by checks", blocks[i])
	}
	return head.String(), checks
}

// runShell runs script with sh in dir, with the real kubectl first on PATH
// and the node's admin kubeconfig as KUBECONFIG, and returns its output.
func runShell(t *testing.T, dir, script string) string {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(kubectl)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+theNode.ControlPlane().AdminKubeconfig(), "KUBECACHEDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("$ %s\n%v\n%s%s", script, err, stdout.String(), stderr.String())
	}
	t.Logf("$ %s\n%s", script, stdout.String())
	return stdout.String()
}

// gitCheckout is a new git repository in a temporary directory holding a
// copy of paths (files or directories of the repository), committed.
func gitCheckout(t *testing.T, root string, paths ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range paths {
		if out, err := exec.Command("cp", "-a", filepath.Join(root, p), dir).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", p, err, out)
		}
	}
	git(t, dir, "init", "--quiet")
	git(t, dir, "add", ".")
	git(t, dir, "-c", "user.name=test", "-c", "user.email=test@example.com", "commit", "--quiet", "-m", "checkout")
	return dir
}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
