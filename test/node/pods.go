package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// The cgroup freezer: cgroup v1 has a freezer hierarchy with
// freezer.state; cgroup v2 has cgroup.freeze in every cgroup. The kubelet's
// cgroupfs driver puts each pod in kubepods/<qos>/pod<uid> and each
// container in a child cgroup named by its id.
const (
	cgroupRoot   = "/sys/fs/cgroup"
	freezerV1    = cgroupRoot + "/freezer"
	cgroupV2Mark = cgroupRoot + "/cgroup.controllers"
)

// FreezePod stops every process of a pod at once with the cgroup freezer,
// as a paused VM or a stalled node would: no signal, no chance to react.
func (n *Node) FreezePod(uid string) error { return freeze(uid, "", true) }

// ThawPod resumes a frozen pod.
func (n *Node) ThawPod(uid string) error { return freeze(uid, "", false) }

// FreezeContainer stops one container of a pod with the cgroup freezer
// (the others run on), as a stalled process would.
func (n *Node) FreezeContainer(podUID, containerID string) error {
	return freeze(podUID, containerID, true)
}

// ThawContainer resumes a frozen container.
func (n *Node) ThawContainer(podUID, containerID string) error {
	return freeze(podUID, containerID, false)
}

func freeze(podUID, containerID string, frozen bool) error {
	_, err := os.Stat(cgroupV2Mark)
	v2 := err == nil
	root, file, value := freezerV1, "freezer.state", map[bool]string{true: "FROZEN", false: "THAWED"}[frozen]
	if v2 {
		root, file, value = cgroupRoot, "cgroup.freeze", map[bool]string{true: "1", false: "0"}[frozen]
	}
	dir, err := podCgroup(root, podUID)
	if err != nil {
		return err
	}
	if containerID != "" {
		dir = filepath.Join(dir, strings.TrimPrefix(containerID, "containerd://"))
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("freezer of %s: %w", dir, err)
	}
	// The write starts the freeze (or the thaw); a task running on another
	// CPU goes on until it next enters the kernel. The freezer reports when
	// every task has stopped (v1: freezer.state leaves FREEZING; v2:
	// cgroup.events says "frozen 1"), and a fault is only a fault from then.
	reached := func(state string) bool { return strings.TrimSpace(state) == value }
	stateFile := file
	if v2 {
		stateFile = "cgroup.events"
		want := "frozen " + value
		reached = func(events string) bool { return slices.Contains(strings.Split(events, "\n"), want) }
	}
	err = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		state, err := os.ReadFile(filepath.Join(dir, stateFile))
		if err != nil {
			return false, err
		}
		return reached(string(state)), nil
	})
	if err != nil {
		return fmt.Errorf("freezer of %s did not report %s %s: %w", dir, file, value, err)
	}
	return nil
}

func podCgroup(root, uid string) (string, error) {
	var found string
	err := filepath.WalkDir(filepath.Join(root, "kubepods"), func(path string, d fs.DirEntry, err error) error {
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
		return "", fmt.Errorf("looking for pod %s's cgroup: %w", uid, err)
	}
	if found == "" {
		return "", fmt.Errorf("pod %s has no cgroup under %s", uid, root)
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

// ProcessCgroup reports which pod a process belongs to (the uid in its
// kubepods/<qos>/pod<uid> cgroup, "" if none) and whether the cgroup
// freezer holds it (cgroup v1: freezer.state FROZEN, also when a parent
// cgroup — the pod's — is frozen; v2: cgroup.events "frozen 1").
func ProcessCgroup(pid int) (podUID string, frozen bool, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false, err
	}
	_, statErr := os.Stat(cgroupV2Mark)
	v2 := statErr == nil
	var path string
	for _, line := range strings.Split(string(b), "\n") {
		// hierarchy-id:controllers:path
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if (v2 && f[0] == "0" && f[1] == "") || (!v2 && slices.Contains(strings.Split(f[1], ","), "freezer")) {
			path = f[2]
			break
		}
	}
	if path == "" {
		return "", false, fmt.Errorf("process %d has no freezer cgroup in %q", pid, b)
	}
	for _, seg := range strings.Split(path, "/") {
		if u, ok := strings.CutPrefix(seg, "pod"); ok {
			podUID = u
		}
	}
	if v2 {
		events, err := os.ReadFile(filepath.Join(cgroupRoot, path, "cgroup.events"))
		if err != nil {
			return podUID, false, err
		}
		return podUID, slices.Contains(strings.Split(string(events), "\n"), "frozen 1"), nil
	}
	state, err := os.ReadFile(filepath.Join(freezerV1, path, "freezer.state"))
	if err != nil {
		return podUID, false, err
	}
	return podUID, strings.TrimSpace(string(state)) == "FROZEN", nil
}
