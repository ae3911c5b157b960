package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// freezerRoot is the cgroup v1 freezer hierarchy; the kubelet's cgroupfs
// driver puts each pod in a kubepods/<qos>/pod<uid> cgroup under it.
const freezerRoot = "/sys/fs/cgroup/freezer"

// FreezePod stops every process of a pod at once with the cgroup freezer,
// as a paused VM or a stalled node would: no signal, no chance to react.
func (n *Node) FreezePod(uid string) error { return setFreezer(uid, "FROZEN") }

// ThawPod resumes a frozen pod.
func (n *Node) ThawPod(uid string) error { return setFreezer(uid, "THAWED") }

func setFreezer(uid, state string) error {
	dir, err := podCgroup(uid)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "freezer.state"), []byte(state), 0o644); err != nil {
		return fmt.Errorf("freezer of pod %s: %w", uid, err)
	}
	return nil
}

func podCgroup(uid string) (string, error) {
	var found string
	err := filepath.WalkDir(filepath.Join(freezerRoot, "kubepods"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "pod"+uid {
			found = path
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("looking for pod %s's freezer cgroup: %w", uid, err)
	}
	if found == "" {
		return "", fmt.Errorf("pod %s has no freezer cgroup under %s", uid, freezerRoot)
	}
	return found, nil
}

// KillContainer SIGKILLs a container's main process from the node, as the
// OOM killer or a crash would end it.
func (n *Node) KillContainer(ctx context.Context, containerID string) (pid int, err error) {
	pid, err = n.ContainerPID(ctx, containerID)
	if err != nil {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, fmt.Errorf("killing pid %d: %w", pid, err)
	}
	return pid, nil
}

// ProcessIdentity reports a container process's user and group ids and
// whether its root filesystem is mounted read-only, read from /proc.
func ProcessIdentity(pid int) (uid, gid string, readOnlyRoot bool, err error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", "", false, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "Uid:":
			uid = strings.Join(f[1:], " ")
		case len(f) >= 2 && f[0] == "Gid:":
			gid = strings.Join(f[1:], " ")
		}
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return "", "", false, err
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			return uid, gid, strings.Contains(","+f[5]+",", ",ro,"), nil
		}
	}
	return "", "", false, errors.New("no root mount in the process's mountinfo")
}

// FreezeContainer stops one container of a pod with the cgroup freezer
// (the others run on), as a stalled process would: no signal, no chance to
// react.
func (n *Node) FreezeContainer(podUID, containerID string) error {
	return setContainerFreezer(podUID, containerID, "FROZEN")
}

// ThawContainer resumes a frozen container.
func (n *Node) ThawContainer(podUID, containerID string) error {
	return setContainerFreezer(podUID, containerID, "THAWED")
}

func setContainerFreezer(podUID, containerID, state string) error {
	dir, err := podCgroup(podUID)
	if err != nil {
		return err
	}
	f := filepath.Join(dir, strings.TrimPrefix(containerID, "containerd://"), "freezer.state")
	if err := os.WriteFile(f, []byte(state), 0o644); err != nil {
		return fmt.Errorf("freezer of container %s: %w", containerID, err)
	}
	return nil
}
