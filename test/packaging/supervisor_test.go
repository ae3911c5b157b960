//go:build integration

package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// TestChartSupervisor: with supervisor.enabled the demo pod gets the init
// container that copies the binary (whose arguments the real binary runs
// here, into a temporary directory), the emptyDir, the app's read-only
// mount of it, and the app's work wrapped in `leader-elector run … --`;
// without it, none of that.
func TestChartSupervisor(t *testing.T) {
	_, d := demo(t, "--set", "supervisor.enabled=true", "--set", "supervisor.stopGrace=3s")
	spec := &d.Spec.Template.Spec
	for _, err := range CheckSidecarPod(spec, true) {
		t.Error(err)
	}
	if len(spec.InitContainers) == 0 || spec.InitContainers[0].Name != "leader-elector-copy" {
		t.Fatalf("the first init container is not leader-elector-copy: %s", asJSON(spec.InitContainers))
	}
	cp := spec.InitContainers[0]
	if cp.RestartPolicy != nil {
		t.Errorf("the copy runs once; it has restartPolicy %v", *cp.RestartPolicy)
	}
	sc, _, _ := Sidecar(spec)
	if cp.Image != sc.Image {
		t.Errorf("the copy's image %q is not the sidecar's %q", cp.Image, sc.Image)
	}
	volume := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "leader-elector-run" && v.EmptyDir != nil })
	if volume < 0 {
		t.Errorf("no leader-elector-run emptyDir: %s", asJSON(spec.Volumes))
	}
	if len(cp.VolumeMounts) != 1 || cp.VolumeMounts[0].Name != "leader-elector-run" || cp.VolumeMounts[0].ReadOnly {
		t.Errorf("the copy's mounts: %s", asJSON(cp.VolumeMounts))
	}
	// The copy's arguments, run by the real binary, with the mount's path
	// moved into a temporary directory.
	dir := t.TempDir()
	args := slices.Clone(cp.Args)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, cp.VolumeMounts[0].MountPath, dir)
	}
	if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
		t.Fatalf("leader-elector %v: %v\n%s", args, err, out)
	}
	copied := filepath.Join(dir, "leader-elector")
	if fi, err := os.Stat(copied); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("the copy is not an executable at %s: %v", copied, err)
	}
	// The copy is the binary: it answers as one.
	if out, err := exec.Command(copied, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), "leader-elector ") {
		t.Fatalf("the copied binary: %v %q", err, out)
	}

	app := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })]
	mounted := slices.ContainsFunc(app.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "leader-elector-run" && m.MountPath == cp.VolumeMounts[0].MountPath && m.ReadOnly
	})
	if !mounted {
		t.Errorf("the app does not mount leader-elector-run read-only at %s: %s", cp.VolumeMounts[0].MountPath, asJSON(app.VolumeMounts))
	}
	wrap := []string{copied[len(dir):], "run", "--log-format=json", "--stop-grace=3s", "--"}
	wrap[0] = cp.VolumeMounts[0].MountPath + wrap[0]
	at := slices.Index(app.Args, wrap[0])
	if at < 0 || !slices.Equal(app.Args[at:at+len(wrap)], wrap) || at+len(wrap) >= len(app.Args) {
		t.Errorf("the app's work is not wrapped in %v: %v", wrap, app.Args)
	}

	// In partition mode the work runs once per owned partition.
	_, d = demo(t, "--set", "supervisor.enabled=true", "--set", "partitions.count=4")
	app = d.Spec.Template.Spec.Containers[slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })]
	wrap = append(slices.Clone(wrap[:len(wrap)-1]), "--partitions", "--")
	wrap[3] = "--stop-grace=2s"
	if at := slices.Index(app.Args, wrap[0]); at < 0 || !slices.Equal(app.Args[at:at+len(wrap)], wrap) {
		t.Errorf("partition mode: the app's work is not wrapped in %v: %v", wrap, app.Args)
	}
	if !strings.Contains(strings.Join(app.Args, "\n"), "$LEADER_ELECTOR_PARTITION") {
		t.Errorf("partition mode: the demo's work does not use its partition: %v", app.Args)
	}

	_, d = demo(t)
	spec = &d.Spec.Template.Spec
	if slices.ContainsFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "leader-elector-copy" }) ||
		slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "leader-elector-run" }) {
		t.Errorf("the default renders the supervisor's parts")
	}
}

// TestKustomizeSupervisor: manifests/example-supervisor is manifests/example
// with the same supervisor parts as the chart's: the copy init container
// on the sidecar's image (its arguments run by the real binary), the
// emptyDir, the app's read-only mount and its work wrapped in
// `leader-elector run … --`.
func TestKustomizeSupervisor(t *testing.T) {
	objs, d := kustomize(t, "example-supervisor")
	spec := &d.Spec.Template.Spec
	for _, err := range CheckSidecarPod(spec, true) {
		t.Error(err)
	}
	checkWiring(t, objs, d)
	i := slices.IndexFunc(spec.InitContainers, func(c corev1.Container) bool { return c.Name == "leader-elector-copy" })
	if i < 0 {
		t.Fatalf("no leader-elector-copy init container: %s", asJSON(spec.InitContainers))
	}
	cp := spec.InitContainers[i]
	sc, _, _ := Sidecar(spec)
	if cp.Image != sc.Image {
		t.Errorf("the copy's image %q is not the sidecar's %q", cp.Image, sc.Image)
	}
	_, chart := demo(t, "--set", "supervisor.enabled=true")
	want := chart.Spec.Template.Spec.InitContainers[0]
	if !slices.Equal(cp.Args, want.Args) || asJSON(cp.VolumeMounts) != asJSON(want.VolumeMounts) {
		t.Errorf("the copy differs from the chart's: %v %v, want %v %v", cp.Args, asJSON(cp.VolumeMounts), want.Args, asJSON(want.VolumeMounts))
	}
	dir := t.TempDir()
	args := slices.Clone(cp.Args)
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "/leader-elector-run", dir)
	}
	if out, err := exec.Command(binary, args...).CombinedOutput(); err != nil {
		t.Fatalf("leader-elector %v: %v\n%s", args, err, out)
	}
	if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == "leader-elector-run" && v.EmptyDir != nil }) {
		t.Errorf("no leader-elector-run emptyDir")
	}
	app := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })]
	if !slices.ContainsFunc(app.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == "leader-elector-run" && m.MountPath == "/leader-elector-run" && m.ReadOnly
	}) {
		t.Errorf("the app does not mount the binary read-only: %s", asJSON(app.VolumeMounts))
	}
	wrap := []string{"/leader-elector-run/leader-elector", "run", "--log-format=json", "--stop-grace=2s", "--"}
	at := slices.Index(app.Args, wrap[0])
	if at < 0 || at+len(wrap) >= len(app.Args) || !slices.Equal(app.Args[at:at+len(wrap)], wrap) {
		t.Errorf("the app's work is not wrapped in %v: %v", wrap, app.Args)
	}
}

// TestKustomizePartitionsSupervisor: manifests/example-partitions-supervisor
// is manifests/example-supervisor in partition mode: the sidecar with
// --partitions (its arguments accepted by the real binary), the
// partitions component's Role, and the work under `leader-elector run
// --partitions`, using its partition.
func TestKustomizePartitionsSupervisor(t *testing.T) {
	objs, d := kustomize(t, "example-partitions-supervisor")
	spec := &d.Spec.Template.Spec
	for _, err := range CheckSidecarPod(spec, true) {
		t.Error(err)
	}
	sc, _, err := Sidecar(spec)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := FlagValue(sc.Args, "partitions"); !ok || got != "4" {
		t.Errorf("--partitions = %q (given %v), want 4: %v", got, ok, sc.Args)
	}
	// The Lease's name comes from the pod's environment
	// (LEADER_ELECTOR_LEASE_NAME), which binaryVerdict does not set.
	if args := append(slices.Clone(sc.Args), "--lease-name=example-leader-elector"); !binaryVerdict(t, args) {
		t.Errorf("leader-elector refuses the example's arguments %v", args)
	}
	var role rbacv1.Role
	if err := objs.OneInto("Role", &role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || !slices.Contains(role.Rules[0].Verbs, "watch") || !slices.Contains(role.Rules[0].Verbs, "delete") {
		t.Errorf("the Role is not the partitions component's: %s", asJSON(role.Rules))
	}
	app := spec.Containers[slices.IndexFunc(spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })]
	wrap := []string{"/leader-elector-run/leader-elector", "run", "--log-format=json", "--stop-grace=2s", "--partitions", "--"}
	at := slices.Index(app.Args, wrap[0])
	if at < 0 || at+len(wrap) >= len(app.Args) || !slices.Equal(app.Args[at:at+len(wrap)], wrap) {
		t.Errorf("the app's work is not wrapped in %v: %v", wrap, app.Args)
	}
	if !strings.Contains(strings.Join(app.Args, "\n"), "$LEADER_ELECTOR_PARTITION") {
		t.Errorf("the example's work does not use its partition: %v", app.Args)
	}
	// Kubernetes' default rolling update (the API server fills in 25% and
	// 25%), not the leader example's all at once.
	if st := d.Spec.Strategy; st.Type != "RollingUpdate" || st.RollingUpdate != nil {
		t.Errorf("strategy %s, want type RollingUpdate and nothing else", asJSON(st))
	}
}
