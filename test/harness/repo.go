package harness

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// modulePath names this repository's go.mod; test/tools/kube has a go.mod
// of its own, so any go.mod found on the way up is not enough.
const modulePath = "github.com/leader-elector/leader-elector"

// RepoRoot returns the repository's top directory: first from this source
// file's path (always there when compiled from a checkout without
// -trimpath), then by walking up from the working directory (go test runs
// in the package's directory, so that finds it under -trimpath too).
func RepoRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
		if isRepoRoot(dir) {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find the repository: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if isRepoRoot(dir) {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find the repository: no go.mod of %s in %s or above", modulePath, wd)
		}
	}
}

// isRepoRoot tells whether dir holds the go.mod of this module. The go.mod
// is read by hand: its first directive is all that is needed, and
// golang.org/x/mod is no dependency of this module.
func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) == 2 && fields[0] == "module" {
			return fields[1] == modulePath
		}
	}
	return false
}

// Build says how to build a program of this repository.
type Build struct {
	// Package is the package to build, relative to the repository root:
	// "." (leader-elector) if empty.
	Package string
	// Race builds with the race detector.
	Race bool
	// Release builds as `make build` does: static, trimmed and stripped,
	// so that memory, CPU and latency are those of a release binary.
	Release bool
	// Output receives go build's output; when nil it is returned in the
	// error instead.
	Output io.Writer
}

// BuildBinary builds b into the file out.
func BuildBinary(ctx context.Context, out string, b Build) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	pkg := b.Package
	if pkg == "" {
		pkg = "."
	}
	args := []string{"build"}
	if b.Race {
		args = append(args, "-race")
	}
	if b.Release {
		args = append(args, "-trimpath", "-ldflags", "-s -w")
	}
	args = append(args, "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	if b.Release {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if b.Output != nil {
		cmd.Stdout, cmd.Stderr = b.Output, b.Output
		err = cmd.Run()
	} else {
		var combined []byte
		combined, err = cmd.CombinedOutput()
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, combined)
		}
	}
	if err != nil {
		return fmt.Errorf("go %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// CleanEnv is this process's environment without the variables the
// sidecar reads as settings (LEADER_ELECTOR_*, POD_*, KUBECONFIG) or as
// facts about where it runs (KUBERNETES_*: with KUBERNETES_SERVICE_HOST set
// it believes it runs in a pod and refuses loopback holder addresses): a
// test's or the tool cache's own LEADER_ELECTOR_* variables are no settings
// of the sidecar, which refuses unknown ones, a test run inside a pod is no
// pod of the candidates', and the candidates are configured by their flags
// alone.
func CleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LEADER_ELECTOR_") || strings.HasPrefix(kv, "POD_") || strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "KUBERNETES_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
