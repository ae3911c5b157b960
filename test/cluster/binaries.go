package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/leader-elector/leader-elector/test/harness"
)

// ToolsDirEnv names the environment variable that points EnsureBinaries at a
// directory of prebuilt binaries, skipping test/tools/build.sh.
const ToolsDirEnv = "LEADER_ELECTOR_TOOLS_DIR"

// binaries are the executables Start needs in Options.BinDir.
var binaries = []string{"etcd", "kube-apiserver"}

// Kubectl is the name of the kubectl binary in EnsureBinaries' directory:
// the tests run the commands the docs tell users to run with the real
// kubectl, at the cluster's version.
const Kubectl = "kubectl"

// ControllerManager is the name of the kube-controller-manager binary, which
// the rollout tests run beside the control plane (its Deployment and
// ReplicaSet controllers).
const ControllerManager = "kube-controller-manager"

// EnsureBinaries returns the directory holding the etcd and kube-apiserver
// binaries and each of extra (for example Kubectl or ControllerManager); a
// missing one is an error. Only what is asked for is built: a cold build of
// each Kubernetes binary costs minutes on a small machine, and the demo and
// most tests need only the two that Start runs.
//
// If $LEADER_ELECTOR_TOOLS_DIR is set, that directory is used as is;
// otherwise test/tools/build.sh builds them (or finds them in its cache) and
// its progress is streamed to progress (which may be nil).
//
// Concurrent callers on this machine (for example several test binaries run
// by `go test -tags integration ./...`) are serialised with a file lock,
// because two build.sh runs building the same binary would write the same
// temporary file.
func EnsureBinaries(ctx context.Context, progress io.Writer, extra ...string) (string, error) {
	if progress == nil {
		progress = io.Discard
	}
	want := append(slices.Clone(binaries), extra...)
	if dir := os.Getenv(ToolsDirEnv); dir != "" {
		if err := checkBinaries(dir, want); err != nil {
			return "", fmt.Errorf("$%s: %w", ToolsDirEnv, err)
		}
		return dir, nil
	}

	script, err := findBuildScript()
	if err != nil {
		return "", err
	}
	unlock, err := lockBuild(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()

	var stdout bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, want...)...)
	cmd.Stdout = io.MultiWriter(&stdout, progress)
	cmd.Stderr = progress
	// build.sh takes the same lock when run on its own (make tools).
	cmd.Env = append(os.Environ(), "LEADER_ELECTOR_TOOLS_LOCK_HELD=1")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s: %w", script, err)
	}
	dir := lastLine(stdout.String())
	if dir == "" {
		return "", fmt.Errorf("%s printed no directory", script)
	}
	if err := checkBinaries(dir, want); err != nil {
		return "", fmt.Errorf("after %s: %w", script, err)
	}
	return dir, nil
}

// findBuildScript locates test/tools/build.sh in the repository.
func findBuildScript() (string, error) {
	const rel = "test/tools/build.sh"
	root, err := harness.RepoRoot()
	if err == nil {
		p := filepath.Join(root, rel)
		if fileExists(p) {
			return p, nil
		}
		err = fmt.Errorf("no %s", p)
	}
	return "", fmt.Errorf("cannot find %s (%w); set $%s to a directory holding %s",
		rel, err, ToolsDirEnv, strings.Join(binaries, ", "))
}

// lockBuild takes an exclusive flock on a file in the cache root that
// build.sh uses, waiting for another holder as long as ctx allows.
func lockBuild(ctx context.Context) (unlock func(), err error) {
	root := os.Getenv("LEADER_ELECTOR_TOOLS_CACHE")
	if root == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("locating the tools cache: %w", err)
		}
		root = filepath.Join(cache, "leader-elector", "tools")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("creating the tools cache: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(root, ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the build lock: %w", err)
	}
	// flock(LOCK_EX) has no timeout, so block in a goroutine and give up on
	// ctx; closing the file on the way out releases a lock taken late.
	locked := make(chan error, 1)
	go func() { locked <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
	select {
	case err := <-locked:
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		go func() { <-locked; f.Close() }()
		return nil, fmt.Errorf("waiting for the build lock %s: %w", f.Name(), ctx.Err())
	}
}

func checkBinaries(dir string, names []string) error {
	var errs []error
	for _, name := range names {
		p := filepath.Join(dir, name)
		st, err := os.Stat(p)
		switch {
		case err != nil:
			errs = append(errs, err)
		case st.IsDir() || st.Mode().Perm()&0o111 == 0:
			errs = append(errs, fmt.Errorf("%s is not an executable file", p))
		}
	}
	return errors.Join(errs...)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// lastLine returns the last non-empty line of s, trimmed.
func lastLine(s string) string {
	var last string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			last = l
		}
	}
	return last
}
