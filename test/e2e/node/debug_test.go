//go:build integration

package node_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/leader-elector/leader-elector/test/packaging"
)

// dumpState logs what is needed to debug a failed test before the namespace
// goes: the pods (with their labels: label routing publishes the leader in
// one) and their containers, the namespace's events, the Lease, the
// Service's EndpointSlices endpoint by endpoint, the last lines of every
// container's log, and the last lines of kube-controller-manager's log (it
// writes the EndpointSlices: a soak once saw the leader labelled and no
// ready endpoint for over a minute after two API server restarts, and its
// log was gone with the node).
func dumpState(t *testing.T, d *deployment) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b strings.Builder
	fmt.Fprintf(&b, "==== state of %s in namespace %s at %s ====\n", d.name, d.namespace, time.Now().Format(time.RFC3339Nano))
	pods, err := d.pods(ctx)
	if err != nil {
		fmt.Fprintf(&b, "listing pods: %v\n", err)
	}
	for i := range pods {
		p := &pods[i]
		fmt.Fprintf(&b, "pod %s: phase %s ready %v ip %s deleting %v labels %v\n", p.Name, p.Status.Phase, podReady(p), p.Status.PodIP, p.DeletionTimestamp != nil, p.Labels)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  container %s: ready %v restarts %d state %s\n", cs.Name, cs.Ready, cs.RestartCount, containerState(cs.State))
		}
	}
	if s, err := d.state(ctx); err == nil {
		fmt.Fprintf(&b, "lease holder %q, ready endpoints %v\n", s.holder, s.readyEndpoints)
	}
	if list, err := d.client.DiscoveryV1().EndpointSlices(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + d.service}); err == nil {
		for _, sl := range list.Items {
			fmt.Fprintf(&b, "EndpointSlice %s (resourceVersion %s, managed by %s):", sl.Name, sl.ResourceVersion, sl.Labels[discoveryv1.LabelManagedBy])
			for _, e := range sl.Endpoints {
				name := "?"
				if e.TargetRef != nil {
					name = e.TargetRef.Name
				}
				fmt.Fprintf(&b, " %s %v ready=%v;", name, e.Addresses, ptr.Deref(e.Conditions.Ready, false))
			}
			b.WriteString("\n")
		}
	}
	if events, err := d.client.CoreV1().Events(d.namespace).List(ctx, metav1.ListOptions{}); err == nil {
		sort.Slice(events.Items, func(i, j int) bool { return eventTime(&events.Items[i]).Before(eventTime(&events.Items[j])) })
		for _, e := range events.Items {
			fmt.Fprintf(&b, "event %s %s %s/%s %s: %s\n", eventTime(&e).Format("15:04:05.000"), e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
	for i := range pods {
		for _, c := range []string{packaging.SidecarName, "app"} {
			fmt.Fprintf(&b, "---- last lines of %s/%s ----\n%s\n", pods[i].Name, c, d.logs(ctx, pods[i].Name, c, 30))
		}
	}
	fmt.Fprintf(&b, "---- last lines of kube-controller-manager ----\n%s\n", lastLines(theNode.LogPath("kube-controller-manager"), 40))
	t.Log(b.String())
}

// logs returns the last lines of a container's log, through the apiserver
// and the kubelet, as `kubectl logs` reads them.
func (d *deployment) logs(ctx context.Context, pod, container string, lines int64) string {
	b, err := d.client.CoreV1().Pods(d.namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, TailLines: &lines, Timestamps: true}).DoRaw(ctx)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	return strings.TrimRight(string(b), "\n")
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format(time.RFC3339)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (%s, exit %d) at %s", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.FinishedAt.Format(time.RFC3339))
	case s.Waiting != nil:
		return "waiting: " + s.Waiting.Reason + " " + s.Waiting.Message
	}
	return "unknown"
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// lastLines returns the last n lines of the file at path, or why it cannot.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
