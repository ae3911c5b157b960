package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// What `make image-test` passes in.
const (
	archiveEnv = "LEADER_ELECTOR_IMAGE_ARCHIVE" // the OCI archive
	versionEnv = "LEADER_ELECTOR_IMAGE_VERSION" // the VERSION it was built with
	baseEnv    = "LEADER_ELECTOR_IMAGE_BASE"    // its BASE_IMAGE
)

// The platforms `make image` builds, and the limit the project set for the
// compressed size of the amd64 image.
var (
	wantPlatforms         = []string{"linux/amd64", "linux/arm64"}
	maxCompressedAMD64    = int64(15 << 20)
	nonRootUser           = "65532:65532"
	sourceURL             = "https://github.com/leader-elector/leader-elector"
	elfMachine            = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	shellsAndInterpreters = []string{"sh", "bash", "ash", "dash", "zsh", "ksh", "busybox", "toybox", "su", "sudo", "apt", "apt-get", "dpkg", "apk", "python", "python3", "perl"}
)

var (
	refName      string
	images       []*platformImage
	wantVersion  string
	base         string
	controlPlane *cluster.ControlPlane
	ctd          *containerd
)

func TestMain(m *testing.M) {
	os.Exit(setUpAndRun(m))
}

func setUpAndRun(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "image test setup: "+format+"\n", args...)
		return 1
	}
	archivePath := os.Getenv(archiveEnv)
	wantVersion, base = os.Getenv(versionEnv), os.Getenv(baseEnv)
	if archivePath == "" || wantVersion == "" || base == "" {
		return fail("%s, %s and %s must be set: run `make image-test`, which builds the image and sets them", archiveEnv, versionEnv, baseEnv)
	}
	work, err := os.MkdirTemp("", "leader-elector-image-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(work)

	a, err := openArchive(archivePath, filepath.Join(work, "archive"))
	if err != nil {
		return fail("%v", err)
	}
	if refName, images, err = a.images(); err != nil {
		return fail("%s: %v", archivePath, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	binDir, err := cluster.EnsureBinaries(ctx, os.Stderr)
	if err != nil {
		return fail("%v", err)
	}
	controlPlane, err = cluster.Start(ctx, cluster.Options{BinDir: binDir, WorkDir: filepath.Join(work, "cluster"), Log: os.Stderr})
	if err != nil {
		return fail("start control plane: %v", err)
	}
	defer controlPlane.Stop()

	if ctd, err = startContainerd(filepath.Join(work, "containerd")); err != nil {
		return fail("%v", err)
	}
	defer ctd.stop()
	if _, _, err := ctd.ctr(ctx, "images", "import", "--all-platforms", archivePath); err != nil {
		return fail("%v", err)
	}
	return m.Run()
}

func forEachPlatform(t *testing.T, check func(t *testing.T, img *platformImage)) {
	for _, img := range images {
		t.Run(img.platform, func(t *testing.T) { check(t, img) })
	}
}

// TestPlatforms: one image index with an image for each platform `make
// image` builds, named so that containerd imports it.
func TestPlatforms(t *testing.T) {
	var got []string
	for _, img := range images {
		got = append(got, img.platform)
	}
	slices.Sort(got)
	if !slices.Equal(got, wantPlatforms) {
		t.Errorf("platforms %v, want %v", got, wantPlatforms)
	}
	if refName == "" {
		t.Errorf("the archive's index has no org.opencontainers.image.ref.name")
	}
	t.Logf("checked: archive %s holds an OCI image index %q for %v", os.Getenv(archiveEnv), refName, got)
}

// TestConfig: the image runs the sidecar as 65532:65532 by default, with
// nothing but its flags to give, and says where it comes from.
func TestConfig(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, img *platformImage) {
		c := img.config
		if got := c.OS + "/" + c.Architecture; got != img.platform {
			t.Errorf("config platform %s, index says %s", got, img.platform)
		}
		if c.Config.User != nonRootUser {
			t.Errorf("User %q, want %q", c.Config.User, nonRootUser)
		}
		if !slices.Equal(c.Config.Entrypoint, []string{"/leader-elector"}) || len(c.Config.Cmd) != 0 {
			t.Errorf("Entrypoint %q, Cmd %q; want [/leader-elector] and none", c.Config.Entrypoint, c.Config.Cmd)
		}
		labels := c.Config.Labels
		for key, want := range map[string]string{
			"org.opencontainers.image.source":  sourceURL,
			"org.opencontainers.image.version": wantVersion,
			"org.opencontainers.image.title":   "leader-elector",
		} {
			if labels[key] != want {
				t.Errorf("label %s = %q, want %q", key, labels[key], want)
			}
		}
		for _, key := range []string{"org.opencontainers.image.licenses", "org.opencontainers.image.revision", "org.opencontainers.image.description"} {
			if labels[key] == "" || labels[key] == "unknown" {
				t.Errorf("label %s = %q", key, labels[key])
			}
		}
		t.Logf("checked: user %s, entrypoint %q, labels %v", c.Config.User, c.Config.Entrypoint, labels)
	})
}

// TestFiles: nothing in the image but the binary (and, with a real base,
// the base's data files): no shell, no interpreter, no package manager, no
// setuid file; the binary belongs to root and the user cannot change it.
func TestFiles(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, img *platformImage) {
		var regular []string
		for name, f := range img.files {
			h := f.header
			if slices.Contains(shellsAndInterpreters, path.Base(name)) {
				t.Errorf("%s is in the image", name)
			}
			if h.Mode&(04000|02000) != 0 {
				t.Errorf("%s is setuid/setgid (mode %o)", name, h.Mode)
			}
			if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeSymlink || h.Typeflag == tar.TypeLink {
				regular = append(regular, name)
			}
		}
		bin, ok := img.files["leader-elector"]
		switch {
		case !ok || bin.header.Typeflag != tar.TypeReg:
			t.Fatalf("no regular file /leader-elector")
		case bin.header.Uid != 0 || bin.header.Gid != 0:
			t.Errorf("/leader-elector owned by %d:%d, want root", bin.header.Uid, bin.header.Gid)
		case bin.header.Mode&0o111 == 0 || bin.header.Mode&0o022 != 0:
			t.Errorf("/leader-elector mode %o: want executable, writable by its owner (root) only", bin.header.Mode)
		}
		if base == "scratch" && !slices.Equal(regular, []string{"leader-elector"}) {
			t.Errorf("built FROM scratch, the image holds %v, want only leader-elector", regular)
		}
		t.Logf("checked: %d entries (%v); no shell or interpreter (%v), nothing setuid; /leader-elector root-owned, mode %o",
			len(img.files), regular, shellsAndInterpreters, bin.header.Mode)
	})
}

// TestBinary: the binary is a static, stripped Go executable for the
// image's platform, built as the Dockerfile says (no cgo, -trimpath,
// -s -w, the version stamped in).
func TestBinary(t *testing.T) {
	forEachPlatform(t, func(t *testing.T, img *platformImage) {
		data := img.files["leader-elector"].data
		f, err := elf.NewFile(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		arch := strings.TrimPrefix(img.platform, "linux/")
		if f.Machine != elfMachine[arch] {
			t.Errorf("ELF machine %v, want %v", f.Machine, elfMachine[arch])
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("dynamically linked: it has an ELF interpreter")
			}
		}
		if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
			t.Errorf("links shared libraries %v", libs)
		}
		if f.Section(".symtab") != nil {
			t.Errorf("has a symbol table: not stripped (-s)")
		}
		info, err := buildinfo.Read(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		settings := map[string]string{}
		for _, s := range info.Settings {
			settings[s.Key] = s.Value
		}
		for key, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": arch} {
			if settings[key] != want {
				t.Errorf("build setting %s = %q, want %q", key, settings[key], want)
			}
		}
		// -trimpath keeps -ldflags out of the build info: look for their
		// effects. -s: no symbol table (above); -w: no DWARF; -X: the
		// version string (TestVersionInContainer runs it where it can).
		for _, sec := range f.Sections {
			if strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
				t.Errorf("has DWARF section %s: not built with -w", sec.Name)
			}
		}
		if !bytes.Contains(data, []byte(wantVersion)) {
			t.Errorf("the binary does not contain the version %q (-X main.version)", wantVersion)
		}
		t.Logf("checked statically: ELF %v, no interpreter or shared libraries, no symbol table or DWARF, version string %q present; built by %s with %v", f.Machine, wantVersion, info.GoVersion, settings)
	})
}

// TestSize reports the image's size per platform and holds the amd64 image
// to the project's limit.
func TestSize(t *testing.T) {
	const mib = 1 << 20
	for _, img := range images {
		fmt.Printf("MEASURED image %s: %.2f MiB compressed (manifest + config + %d layer(s), what a node pulls), %.2f MiB uncompressed (base %s)\n",
			img.platform, float64(img.compressedSize)/mib, len(img.manifest.Layers), float64(img.uncompressedSize)/mib, base)
		if img.platform == "linux/amd64" && img.compressedSize > maxCompressedAMD64 {
			t.Errorf("linux/amd64 image is %d bytes compressed, over the %d MiB limit", img.compressedSize, maxCompressedAMD64/mib)
		}
	}
}

// hostPlatform is the one platform whose image runs here.
func hostPlatform(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		t.Fatal(err)
	}
	p := "linux/" + strings.TrimSpace(string(out))
	t.Logf("running the %s image in containerd %s with runc; the other platforms' binaries are checked statically only (TestBinary), as this machine has no emulator", p, ctrVersion(t))
	return p
}

func ctrVersion(t *testing.T) string {
	out, _, err := ctd.ctr(context.Background(), "version")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(unknown version)"
}

// TestVersionInContainer: `--version` works inside a container of the
// image (read-only root filesystem, default seccomp profile), and the
// image has no shell to exec.
func TestVersionInContainer(t *testing.T) {
	platform := hostPlatform(t)
	ctx := context.Background()
	out, _, err := ctd.ctr(ctx, "run", "--rm", "--platform", platform, "--read-only", "--seccomp", refName, "version", "/leader-elector", "--version")
	if err != nil {
		t.Fatal(err)
	}
	if want := "leader-elector " + wantVersion + "\n"; out != want {
		t.Errorf("--version printed %q, want %q", out, want)
	}
	_, stderr, err := ctd.ctr(ctx, "run", "--rm", "--platform", platform, refName, "shell", "/bin/sh", "-c", "true")
	if err == nil || !strings.Contains(stderr, "no such file or directory") {
		t.Errorf("exec /bin/sh in the image: %v, %q; want no such file", err, stderr)
	}
	t.Logf("checked in a container: `/leader-elector --version` printed %q and exited 0; exec of /bin/sh failed: %s", out, strings.TrimSpace(stderr))
}

// TestElectsInContainer: a container of the image, configured as a pod
// would configure it — the ServiceAccount's token, CA and namespace mounted
// at the in-cluster path, KUBERNETES_SERVICE_HOST/PORT, POD_NAME, no
// kubeconfig — runs as 65532 with no capabilities on a read-only root
// filesystem, elects itself with the shipped RBAC (manifests/base) against
// the real API server, and on SIGTERM releases the Lease and exits 0.
func TestElectsInContainer(t *testing.T) {
	platform := hostPlatform(t)
	ctx := context.Background()
	const namespace, podName = "image-e2e", "image-pod"

	cs := controlPlane.AdminClient()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.KustomizeBuild(ctx, packaging.ManifestsDir("base"))
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	if err := packaging.Apply(ctx, controlPlane.AdminConfig(), objs); err != nil {
		t.Fatal(err)
	}
	var (
		sa    corev1.ServiceAccount
		role  rbacv1.Role
		lease coordinationv1.Lease
	)
	for kind, into := range map[string]any{"ServiceAccount": &sa, "Role": &role, "Lease": &lease} {
		if err := objs.OneInto(kind, into); err != nil {
			t.Fatal(err)
		}
	}

	// The ServiceAccount volume, as the kubelet would project it.
	ttl := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saDir := filepath.Join(t.TempDir(), "serviceaccount")
	if err := os.Mkdir(saDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{
		"token":     []byte(tr.Status.Token),
		"ca.crt":    controlPlane.AdminConfig().TLSClientConfig.CAData,
		"namespace": []byte(namespace),
	} {
		if err := os.WriteFile(filepath.Join(saDir, name), content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	apiURL, err := url.Parse(controlPlane.Host())
	if err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort, _ := net.SplitHostPort(apiURL.Host)
	ports := freePorts(t, 2)
	pidFile := filepath.Join(t.TempDir(), "pid")

	var logs bytes.Buffer
	run := ctd.command(ctx, "run", "--rm", "--platform", platform,
		"--read-only", "--seccomp", "--net-host",
		"--pid-file", pidFile,
		"--mount", "type=bind,src="+saDir+",dst="+packaging.TokenMountPath+",options=rbind:ro",
		"--env", "KUBERNETES_SERVICE_HOST="+apiHost,
		"--env", "KUBERNETES_SERVICE_PORT="+apiPort,
		"--env", "POD_NAME="+podName,
		refName, "elector",
		"/leader-elector", "--lease-name="+lease.Name,
		fmt.Sprintf("--http-address=127.0.0.1:%d", ports[0]),
		fmt.Sprintf("--probe-address=127.0.0.1:%d", ports[1]),
		"-v=2")
	run.Stdout, run.Stderr = &logs, &logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() { exitErr = run.Wait(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_, _, _ = ctd.ctr(context.Background(), "task", "kill", "--signal", "SIGKILL", "elector")
			<-exited
		}
		if t.Failed() {
			t.Logf("container output:\n%s", logs.String())
		}
	})

	var state struct {
		Lease    struct{ Namespace, Name string } `json:"lease"`
		Identity string                           `json:"identity"`
		IsLeader bool                             `json:"isLeader"`
	}
	client := &http.Client{Timeout: 2 * time.Second}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("the container exited: %v", exitErr)
		default:
		}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/leader", ports[0]))
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&state) == nil && state.IsLeader, nil
	}); err != nil {
		t.Fatalf("the container did not lead: %v (last state %+v)", err, state)
	}
	if state.Identity != podName || state.Lease.Namespace != namespace || state.Lease.Name != lease.Name {
		t.Errorf("leads as %q on %s/%s; want %q on %s/%s (identity from POD_NAME, namespace from the mounted namespace file)",
			state.Identity, state.Lease.Namespace, state.Lease.Name, podName, namespace, lease.Name)
	}
	if resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz of the leader: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// What the kernel says about the container's process.
	pidBytes, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(pidBytes))
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	for key, want := range map[string]string{"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if fields[key] != want {
			t.Errorf("/proc/%s/status %s: %q, want %q", pid, key, fields[key], want)
		}
	}
	mountinfo, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	rootReadOnly := false
	for _, l := range strings.Split(string(mountinfo), "\n") {
		f := strings.Fields(l)
		if len(f) > 5 && f[4] == "/" {
			rootReadOnly = slices.Contains(strings.Split(f[5], ","), "ro")
		}
	}
	if !rootReadOnly {
		t.Errorf("the container's root filesystem is not mounted read-only")
	}
	holder := leaseHolder(t, namespace, lease.Name)
	if holder != podName {
		t.Errorf("the Lease names %q, want %q", holder, podName)
	}

	if _, _, err := ctd.ctr(ctx, "task", "kill", "--signal", "SIGTERM", "elector"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if exitErr != nil {
			t.Errorf("after SIGTERM the container exited with %v, want 0", exitErr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after SIGTERM")
	}
	if holder := leaseHolder(t, namespace, lease.Name); holder != "" {
		t.Errorf("after SIGTERM the Lease names %q, want it released", holder)
	}
	t.Logf("checked in a container (read-only root, --seccomp, host network, in-cluster config from %s): led %s/%s as %s; /proc/%s/status Uid %s, CapEff %s, NoNewPrivs %s, Seccomp %s; released the Lease and exited 0 on SIGTERM",
		packaging.TokenMountPath, namespace, lease.Name, podName, pid, fields["Uid"], fields["CapEff"], fields["NoNewPrivs"], fields["Seccomp"])
}

func leaseHolder(t *testing.T, namespace, name string) string {
	t.Helper()
	l, err := controlPlane.AdminClient().CoordinationV1().Leases(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
