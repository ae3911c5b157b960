package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// QemuAarch64 is the qemu-user emulator the arm64 checks run arm64 builds
// with: Debian's qemu-user-static (make qemu-deps). It is called by name,
// so the machine needs no binfmt_misc registration.
const QemuAarch64 = "qemu-aarch64-static"

// Arm64Program makes the arm64 binary bin runnable here: it checks that
// `bin --version` under qemu prints "leader-elector <version>" and exits 0,
// and returns a wrapper script next to bin that execs qemu with bin and its
// arguments. A process started from the wrapper is qemu itself, which
// passes the signals it gets on to the emulated program, so the harness
// can run and signal it like any candidate. A missing qemu is an error,
// never a skip.
func Arm64Program(ctx context.Context, bin, version string) (wrapper string, err error) {
	qemu, err := exec.LookPath(QemuAarch64)
	if err != nil {
		return "", fmt.Errorf("%s not found (%v): run make qemu-deps (Debian's qemu-user-static)", QemuAarch64, err)
	}
	out, err := exec.CommandContext(ctx, qemu, bin, "--version").CombinedOutput()
	if want := fmt.Sprintf("leader-elector %s\n", version); err != nil || string(out) != want {
		return "", fmt.Errorf("%s %s --version = %q, %v; want %q and exit 0", QemuAarch64, filepath.Base(bin), out, err, want)
	}
	wrapper = bin + ".sh"
	if err := os.WriteFile(wrapper, fmt.Appendf(nil, "#!/bin/sh\nexec %q %q \"$@\"\n", qemu, bin), 0o755); err != nil {
		return "", err
	}
	return wrapper, nil
}
