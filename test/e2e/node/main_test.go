//go:build integration

// Package node_test deploys what the project ships — the leader-elector
// image, manifests/example and the Helm chart — on a real single-node
// Kubernetes (test/node: kubelet, containerd, runc, kube-proxy, scheduler,
// controller-manager) and checks what users rely on: one Ready pod, the
// Service answering from the leader alone, failover after pod deletion, a
// killed sidecar and a frozen pod, rollouts, native sidecar ordering, and the
// sidecar's least privilege, and that the supervisor (`leader-elector run`)
// never lets two pods' workloads run at once.
//
// It runs only inside the network namespace test/node/run.sh creates
// (`make e2e-cluster`); started any other way it fails at once, never skips.
package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/test/cluster"
	"github.com/leader-elector/leader-elector/test/node"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// theNode is the cluster every test deploys into, each in its own namespace.
var theNode *node.Node

// kubectl is the real kubectl, built with the node's components at their
// version (test/tools/build.sh), for the tests that run what users run.
var kubectl string

// The images the node runs, imported from archives (nothing can be pulled
// here): the leader-elector image as `make image-test-archive` names it —
// the chart and the example are given it, as users give theirs — and the
// images the shipped manifests and chart refer to.
const (
	nodeImageRepository = packaging.TestImageRepository
	nodeImageTag        = "test"
	nodeImage           = nodeImageRepository + ":" + nodeImageTag
	busyboxImage        = "docker.io/library/busybox:1.37"
	pauseImage          = "localhost/leader-elector-test/pause:1"
	// echoAppImage is test/node/echoapp, the proxy proof's app.
	echoAppImage = "localhost/leader-elector-test/echoapp:1"
	// exactlyOnceImage is examples/exactlyonce's command, the worker of
	// the partition example's rollout.
	exactlyOnceImage = "localhost/leader-elector-test/exactlyonce:1"
)

// nodeSlack is this suite's one allowance in a timing bound it asserts
// (docs/development.md, "Timing bounds in tests"): the delay the deployed
// timings do not predict between an event and the test's observing it on
// the real node — API server latency (a write, the watch event that
// reports it), a controller's write, process scheduling on a loaded 2-core
// machine, the test's own poll. A step that is the kubelet's or
// kube-proxy's (a SIGTERM's delay, a pod's start) is not in it: the test
// measures that step and bounds only the sidecar's part.
const nodeSlack = time.Second

// nodeGiveUp is how long a wait that asserts no bound waits before it fails
// and says what did not happen (a log line, an Event, a freeze taking
// effect): generous, so that only a broken run reaches it. Waits on pods
// use settleTimeout, which covers their start.
const nodeGiveUp = time.Minute

// readinessPeriod is the sidecar's readiness probe period in the shipped
// chart and examples: the kubelet sees a new leader Ready within it.
const readinessPeriod = time.Second

func TestMain(m *testing.M) {
	os.Exit(setUpAndRun(m))
}

// env returns a required environment variable set by `make e2e-cluster`.
func env(name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s is not set: run these tests with `make e2e-cluster`", name)
	}
	return v, nil
}

func setUpAndRun(m *testing.M) int {
	var vals []string
	for _, name := range []string{"LEADER_ELECTOR_NODE_WORKDIR", "LEADER_ELECTOR_NODE_BIN_DIR", "LEADER_ELECTOR_NODE_IMAGE_ARCHIVE", "LEADER_ELECTOR_NODE_IMAGES_DIR"} {
		v, err := env(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "node e2e setup:", err)
			return 1
		}
		vals = append(vals, v)
	}
	work, binDir, imageArchive, imagesDir := vals[0], vals[1], vals[2], vals[3]
	kubectl = filepath.Join(binDir, cluster.Kubectl)
	if _, err := os.Stat(kubectl); err != nil {
		fmt.Fprintln(os.Stderr, "node e2e setup: no kubectl (test/tools/build.sh builds it):", err)
		return 1
	}
	// Which image runs: the shipped Dockerfile built offline (a local Go
	// builder stage and a scratch base instead of distroless, which cannot
	// be pulled), as `make image-test` builds it.
	fmt.Fprintf(os.Stderr, "leader-elector image: %s (the shipped Dockerfile, built offline on a scratch base)\n", filepath.Base(imageArchive))

	var err error
	if restartBackOff, err = maxRestartBackOff(); err != nil {
		fmt.Fprintln(os.Stderr, "node e2e setup:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	n, err := node.Start(ctx, node.Options{
		MaxRestartBackOff: restartBackOff,
		BinDir:            binDir,
		WorkDir:           work,
		Images: []node.Image{
			{Archive: filepath.Join(imagesDir, "pause.oci.tar"), Names: []string{pauseImage}},
			{Archive: filepath.Join(imagesDir, "busybox.oci.tar"), Names: []string{busyboxImage}},
			{Archive: filepath.Join(imagesDir, "echoapp.oci.tar"), Names: []string{echoAppImage}},
			{Archive: filepath.Join(imagesDir, "exactlyonce.oci.tar"), Names: []string{exactlyOnceImage}},
			{Archive: imageArchive, Names: []string{nodeImage}},
		},
		PauseImage: pauseImage,
		Log:        os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node e2e setup:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "MEASURED node up (control plane, containerd, kubelet, kube-proxy) in %v\n", time.Since(began).Round(time.Millisecond))
	theNode = n
	code := m.Run()
	stopped := time.Now()
	n.Stop()
	fmt.Fprintf(os.Stderr, "node stopped in %v\n", time.Since(stopped).Round(time.Millisecond))
	if code != 0 {
		fmt.Fprintf(os.Stderr, "component logs were in %s (keep them: LEADER_ELECTOR_NODE_KEEP=1 make e2e-cluster)\n", filepath.Join(work, "logs"))
	}
	return code
}

// maxRestartBackOffEnv caps the kubelet's crash back-off for a run (`make
// soak RESTART_BACKOFF=10s`): a sidecar the soak kills again and again
// otherwise waits up to 5 minutes to run again, which is the kubelet's
// behaviour, not the sidecar's. Unset, the kubelet's default holds, as in
// every other run.
const maxRestartBackOffEnv = "LEADER_ELECTOR_NODE_MAX_RESTART_BACKOFF"

// restartBackOff is the run's cap (maxRestartBackOffEnv), 0 for none: the
// soak's report names it in its replay command.
var restartBackOff time.Duration

func maxRestartBackOff() (time.Duration, error) {
	v := os.Getenv(maxRestartBackOffEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	// The kubelet's own range for maxContainerRestartPeriod.
	if err != nil || d < time.Second || d > 5*time.Minute {
		return 0, fmt.Errorf("%s=%q: want a duration within 1s..5m", maxRestartBackOffEnv, v)
	}
	return d, nil
}
