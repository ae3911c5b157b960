//go:build integration

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/harness/harnesstest"
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
			"org.opencontainers.image.source":   sourceURL,
			"org.opencontainers.image.version":  wantVersion,
			"org.opencontainers.image.title":    "leader-elector",
			"org.opencontainers.image.licenses": "Apache-2.0",
		} {
			if labels[key] != want {
				t.Errorf("label %s = %q, want %q", key, labels[key], want)
			}
		}
		for _, key := range []string{"org.opencontainers.image.revision", "org.opencontainers.image.description"} {
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

// podEnv is what a pod's sidecar gets from the cluster: the shipped RBAC and
// Lease (manifests/base) applied in its namespace, and the ServiceAccount
// volume — token, CA and namespace — as the kubelet would project it.
type podEnv struct {
	namespace, lease, saDir string
}

func setUpPodEnv(t *testing.T, namespace string) podEnv {
	t.Helper()
	ctx := context.Background()
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
		lease coordinationv1.Lease
	)
	for kind, into := range map[string]any{"ServiceAccount": &sa, "Lease": &lease} {
		if err := objs.OneInto(kind, into); err != nil {
			t.Fatal(err)
		}
	}
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
	return podEnv{namespace: namespace, lease: lease.Name, saDir: saDir}
}

// sidecarContainer is the image running as a pod's sidecar in containerd:
// read-only root, the default seccomp profile, the host's network (as a
// pod's containers share one), the ServiceAccount volume at the in-cluster
// path, KUBERNETES_SERVICE_HOST/PORT and POD_NAME, no kubeconfig.
type sidecarContainer struct {
	id                 string
	apiPort, probePort int
	pidFile            string
	logs               bytes.Buffer
	exited             chan struct{}
	exitErr            error
}

func runSidecarContainer(t *testing.T, env podEnv, id, podName string) *sidecarContainer {
	t.Helper()
	apiURL, err := url.Parse(controlPlane.Host())
	if err != nil {
		t.Fatal(err)
	}
	apiHost, apiPort, _ := net.SplitHostPort(apiURL.Host)
	ports := harnesstest.FreePorts(t, 2)
	c := &sidecarContainer{id: id, apiPort: ports[0], probePort: ports[1], pidFile: filepath.Join(t.TempDir(), "pid"), exited: make(chan struct{})}
	run := ctd.command(context.Background(), "run", "--rm", "--platform", hostPlatform(t),
		"--read-only", "--seccomp", "--net-host",
		"--pid-file", c.pidFile,
		"--mount", "type=bind,src="+env.saDir+",dst="+packaging.TokenMountPath+",options=rbind:ro",
		"--env", "KUBERNETES_SERVICE_HOST="+apiHost,
		"--env", "KUBERNETES_SERVICE_PORT="+apiPort,
		"--env", "POD_NAME="+podName,
		refName, id,
		"/leader-elector", "--lease-name="+env.lease,
		fmt.Sprintf("--http-address=127.0.0.1:%d", c.apiPort),
		fmt.Sprintf("--probe-address=127.0.0.1:%d", c.probePort),
		"-v=2")
	run.Stdout, run.Stderr = &c.logs, &c.logs
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.exitErr = run.Wait(); close(c.exited) }()
	t.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			_, _, _ = ctd.ctr(context.Background(), "task", "kill", "--signal", "SIGKILL", id)
			<-c.exited
		}
		if t.Failed() {
			t.Logf("container %s output:\n%s", id, c.logs.String())
		}
	})
	return c
}

// waitState polls the sidecar's GET /leader until cond holds.
func (c *sidecarContainer) waitState(t *testing.T, timeout time.Duration, cond func(api.Leader) bool) api.Leader {
	t.Helper()
	var state api.Leader
	client := api.NewClient(fmt.Sprintf("http://127.0.0.1:%d", c.apiPort), &http.Client{Timeout: 2 * time.Second})
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		select {
		case <-c.exited:
			return false, fmt.Errorf("the container exited: %v", c.exitErr)
		default:
		}
		s, err := client.Leader(ctx)
		if err != nil {
			return false, nil
		}
		state = s
		return cond(state), nil
	}); err != nil {
		t.Fatalf("container %s: %v (last state %+v)", c.id, err, state)
	}
	return state
}

// TestElectsInContainer: a container of the image, configured as a pod
// would configure it (see sidecarContainer), runs as 65532 with no
// capabilities on a read-only root filesystem, elects itself with the
// shipped RBAC (manifests/base) against the real API server, and on SIGTERM
// releases the Lease and exits 0.
func TestElectsInContainer(t *testing.T) {
	const podName = "image-pod"
	env := setUpPodEnv(t, "image-e2e")
	c := runSidecarContainer(t, env, "elector", podName)
	state := c.waitState(t, 30*time.Second, func(s api.Leader) bool { return s.IsLeader })
	if state.Identity != podName || state.Lease.Namespace != env.namespace || state.Lease.Name != env.lease {
		t.Errorf("leads as %q on %s/%s; want %q on %s/%s (identity from POD_NAME, namespace from the mounted namespace file)",
			state.Identity, state.Lease.Namespace, state.Lease.Name, podName, env.namespace, env.lease)
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", c.probePort)); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz of the leader: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// What the kernel says about the container's process.
	pidBytes, err := os.ReadFile(c.pidFile)
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
	if holder := harnesstest.LeaseHolder(t, controlPlane, env.namespace, env.lease); holder != podName {
		t.Errorf("the Lease names %q, want %q", holder, podName)
	}

	if _, _, err := ctd.ctr(context.Background(), "task", "kill", "--signal", "SIGTERM", c.id); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.exited:
		if c.exitErr != nil {
			t.Errorf("after SIGTERM the container exited with %v, want 0", c.exitErr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("still running 15 s after SIGTERM")
	}
	if holder := harnesstest.LeaseHolder(t, controlPlane, env.namespace, env.lease); holder != "" {
		t.Errorf("after SIGTERM the Lease names %q, want it released", holder)
	}
	t.Logf("checked in a container (read-only root, --seccomp, host network, in-cluster config from %s): led %s/%s as %s; /proc/%s/status Uid %s, CapEff %s, NoNewPrivs %s, Seccomp %s; released the Lease and exited 0 on SIGTERM",
		packaging.TokenMountPath, env.namespace, env.lease, podName, pid, fields["Uid"], fields["CapEff"], fields["NoNewPrivs"], fields["Seccomp"])
}

// TestDemoApp: the demo app of manifests/example — its own shell script,
// run by busybox — next to sidecar containers of the image, as in two pods:
// the leader's app logs that it does the singleton work and serves its pod
// name over HTTP (what the Service routes to); the follower's app logs that
// it stands by; each stops at once on SIGTERM, well inside the grace period.
func TestDemoApp(t *testing.T) {
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatalf("busybox runs the demo app's script here: install it (make image-deps does): %v", err)
	}
	objs, err := packaging.KustomizeBuild(context.Background(), packaging.ManifestsDir("example"))
	if err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "app" })
	if i < 0 {
		t.Fatal("manifests/example has no container named app")
	}
	app := d.Spec.Template.Spec.Containers[i]
	if !slices.Equal(app.Command, []string{"/bin/sh", "-c"}) || len(app.Args) != 1 {
		t.Fatalf("the app runs %q %q, not one /bin/sh -c script", app.Command, app.Args)
	}
	script := app.Args[0]
	// The busybox image's /bin: every applet under its own name.
	bin := t.TempDir()
	if out, err := exec.Command(busybox, "--install", "-s", bin).CombinedOutput(); err != nil {
		t.Fatalf("busybox --install: %v: %s", err, out)
	}

	env := setUpPodEnv(t, "image-demo")
	leader := runSidecarContainer(t, env, "demo-a", "demo-a")
	leader.waitState(t, 30*time.Second, func(s api.Leader) bool { return s.IsLeader })
	follower := runSidecarContainer(t, env, "demo-b", "demo-b")
	follower.waitState(t, 30*time.Second, func(s api.Leader) bool { return s.Holder == "demo-a" && !s.IsLeader })

	for _, tc := range []struct {
		pod     string
		sidecar *sidecarContainer
		want    string
	}{
		{"demo-a", leader, "leading: doing the singleton work."},
		{"demo-b", follower, "standing by."},
	} {
		t.Run(tc.pod, func(t *testing.T) {
			// The pod's addresses and its /tmp volume, as this machine has them.
			httpPort := harnesstest.FreePorts(t, 1)[0]
			pod := map[string]string{
				"127.0.0.1:4040": fmt.Sprintf("127.0.0.1:%d", tc.sidecar.apiPort),
				"-p 8081":        fmt.Sprintf("-p %d", httpPort),
				"/tmp/www":       filepath.Join(t.TempDir(), "www"),
			}
			var pairs []string
			for from, to := range pod {
				if !strings.Contains(script, from) {
					t.Fatalf("the demo script no longer has %q; update this test:\n%s", from, script)
				}
				pairs = append(pairs, from, to)
			}
			// Output to a file, not a pipe: the script's background sleep
			// would hold a pipe open after the shell exits. The shell is
			// the container's PID 1; when it exits, the runtime kills the
			// rest, as the cleanup does with the process group here.
			logPath := filepath.Join(t.TempDir(), "app.log")
			logFile, err := os.Create(logPath)
			if err != nil {
				t.Fatal(err)
			}
			defer logFile.Close()
			output := func() string { b, _ := os.ReadFile(logPath); return string(b) }
			cmd := exec.Command(busybox, "sh", "-c", strings.NewReplacer(pairs...).Replace(script))
			cmd.Env = []string{"POD_NAME=" + tc.pod, "PATH=" + bin}
			cmd.Stdout, cmd.Stderr = logFile, logFile
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
				if t.Failed() {
					t.Logf("the app's output:\n%s", output())
				}
			})
			if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
				return strings.Contains(output(), tc.want), nil
			}); err != nil {
				t.Fatalf("the app did not log %q", tc.want)
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", httpPort))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != tc.pod+"\n" {
				t.Errorf("the app serves %q, want its pod name", body)
			}
			began := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("the app exited with %v on SIGTERM, want 0", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("the app ignores SIGTERM: the kubelet would wait out the grace period")
			}
			t.Logf("checked with %s: the app logged %q, served %q, stopped %v after SIGTERM", busybox, tc.want, body, time.Since(began).Round(time.Millisecond))
		})
	}
}
