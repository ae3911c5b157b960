//go:build integration

package node_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/leader-elector/leader-elector/test/harness"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// TestContribPodSpec: a Deployment in the style of the charts of the
// retired k8s.gcr.io/leader-elector image (testdata/contrib.yaml: its flags,
// --ttl and --use-cluster-credentials included, and kubelet probes on "/"
// and "/health" of the --http port) runs unchanged on a real kubelet: every
// pod starts and stays up (no crash loop), the old probes pass on leader
// and followers alike, and one pod holds the Lease.
func TestContribPodSpec(t *testing.T) {
	ctx := context.Background()
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	// The suite runs as a built binary, not from this directory.
	data, err := os.ReadFile(filepath.Join(root, "test", "e2e", "node", "testdata", "contrib.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := packaging.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	setSidecarImage(t, objs, nodeImage)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "contrib"}}
	if _, err := theNode.Client().CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := deploy(t, "a contrib-style pod spec", objs)

	var last string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := d.pods(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		holder, err := d.holder(ctx)
		if err != nil {
			last = err.Error()
			return false, nil
		}
		ready := 0
		for i := range pods {
			if podReady(&pods[i]) {
				ready++
			}
		}
		last = "pods " + joinNames(pods) + ", holder " + holder
		return len(pods) == 3 && ready == 3 && slices.Contains(names(pods), holder), nil
	})
	if err != nil {
		t.Fatalf("no leader with every pod Ready on the old probes: %s", last)
	}
	// Ready and leading is not enough if the kubelet restarted a
	// container on the way (a crash loop that recovered).
	pods, err := d.pods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Errorf("%s/%s restarted %d times", p.Name, s.Name, s.RestartCount)
			}
		}
	}
	holder, _ := d.holder(ctx)
	t.Logf("leader %s; every pod Ready on the old probes", holder)
}

func joinNames(pods []corev1.Pod) string {
	out := ""
	for i, n := range names(pods) {
		if i > 0 {
			out += ","
		}
		out += n
	}
	return out
}

// setSidecarImage gives the leader-elector container of every Deployment in
// objs the image the node has: the one thing a user changes in such a pod
// spec besides the RBAC.
func setSidecarImage(t *testing.T, objs packaging.Objects, image string) {
	t.Helper()
	set := 0
	for _, u := range objs {
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, err := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range containers {
			if m, ok := c.(map[string]any); ok && m["name"] == "leader-elector" {
				m["image"] = image
				set++
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
	}
	if set == 0 {
		t.Fatal("no leader-elector container in the pod spec")
	}
}
