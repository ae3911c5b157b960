//go:build integration

package node_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/leader-elector/leader-elector/routing"
	"github.com/leader-elector/leader-elector/test/packaging"
)

// deployment is one shipped workload on the node: the demo Deployment with
// the sidecar, its Service and its Lease.
type deployment struct {
	name       string // what was deployed, for messages
	namespace  string
	deployment string
	service    string
	lease      string
	leaseDur   time.Duration // the sidecar's --lease-duration as deployed
	retry      time.Duration // the sidecar's --retry-period as deployed
	// route is the sidecar's --route: "none" (the Service routes by
	// readiness, only the leader is Ready) or a routing mode
	// ("endpointslice", "label": every pod is Ready as a candidate, the
	// leader publishes itself).
	route string
	// partitions is the group's partition count (--partitions), 0 when
	// the sidecar elects one leader; lease is then the group's name.
	partitions int
	client     kubernetes.Interface
	// policies and bindings are the cluster-scoped admission objects it
	// installed: deleting the namespace leaves them, and a later install
	// into a namespace of the same name would meet them.
	policies, bindings []string
}

// routed reports whether the leader publishes itself (every pod is Ready).
func (d *deployment) routed() bool { return d.route != "none" }

// deployExample applies manifests/<name> (example or one of its routing
// variants) as shipped, with the image set as the example says
// (`kustomize edit set image`).
func deployExample(t *testing.T, name string) *deployment {
	t.Helper()
	ctx := context.Background()
	objs, err := packaging.KustomizeExampleWithImage(ctx, name, nodeImage)
	if err != nil {
		t.Fatal(err)
	}
	return deploy(t, "manifests/"+name, objs)
}

// createRestrictedNamespace creates namespace with the restricted Pod
// Security level, which every shipped workload must pass.
func createRestrictedNamespace(t *testing.T, namespace string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
	}}}
	if _, err := theNode.Client().CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Pods mount their projected ServiceAccount token with the cluster's CA
	// from the ConfigMap kube-root-ca.crt, which the controller manager
	// publishes in every new namespace. Right after the soak's control-plane
	// faults it may take a while; a pod created before it exists retries
	// the mount with the kubelet's back-off (up to two minutes), so wait
	// for it first.
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := theNode.Client().CoreV1().ConfigMaps(namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("namespace %s: the controller manager did not publish kube-root-ca.crt within 2 minutes: %v", namespace, err)
	}
}

// chartDemoArgs are helm's arguments for the chart's demo with the node's
// image, and values (key=value) on top.
func chartDemoArgs(values []string) []string {
	args := []string{"--set", "demo.enabled=true", "--set", "image.repository=" + nodeImageRepository, "--set", "image.tag=" + nodeImageTag}
	for _, v := range values {
		args = append(args, "--set", v)
	}
	return args
}

// deployChart installs the chart with its demo workload, as `helm install
// --set demo.enabled=true` would (rendered with helm template and applied:
// the same objects).
func deployChart(t *testing.T, values ...string) *deployment {
	t.Helper()
	return deployChartIn(t, "chart-demo", values...)
}

// deployChartIn is deployChart in its own namespace. The soak gives each
// mode a namespace of its own: after its etcd restarts, kube-controller-
// manager's informers may still hold the last mode's Deployment, and a
// Deployment of the same namespace and name is taken for it. In the
// 7-minute soak of 26ea0e3 the label mode's Deployment got a ReplicaSet
// of the endpointslice mode's template beside its own (two of 7 pods; the
// leader, of the old template, never set the route label) and no ready
// endpoint for 49 s.
func deployChartIn(t *testing.T, namespace string, values ...string) *deployment {
	t.Helper()
	ctx := context.Background()
	createRestrictedNamespace(t, namespace)
	objs, err := packaging.HelmTemplate(ctx, packaging.ChartDir(), "demo", namespace, chartDemoArgs(values)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := packaging.InNamespace(objs, namespace); err != nil {
		t.Fatal(err)
	}
	name := "the Helm chart"
	if len(values) > 0 {
		name += " (" + strings.Join(values, ", ") + ")"
	}
	return deploy(t, name, objs)
}

func deploy(t *testing.T, name string, objs packaging.Objects) *deployment {
	t.Helper()
	dep := track(t, name, objs)
	if err := packaging.Apply(context.Background(), theNode.ControlPlane().AdminConfig(), objs); err != nil {
		t.Fatalf("applying %s: %v", name, err)
	}
	t.Logf("deployed %s: Deployment %s/%s, Service %s, Lease %s (lease duration %v, route %s)", name, dep.namespace, dep.deployment, dep.service, dep.lease, dep.leaseDur, dep.route)
	return dep
}

// track is a deployment of objs (not applied yet), removed when the test
// ends.
func track(t *testing.T, name string, objs packaging.Objects) *deployment {
	t.Helper()
	var d appsv1.Deployment
	if err := objs.OneInto("Deployment", &d); err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	if err := objs.OneInto("Service", &svc); err != nil {
		t.Fatal(err)
	}
	// The election's Lease: with health gating the candidates Lease
	// (<lease>-candidates) is shipped too.
	var lease coordinationv1.Lease
	var leases packaging.Objects
	for _, u := range objs.OfKind("Lease") {
		if !strings.HasSuffix(u.GetName(), "-candidates") {
			leases = append(leases, u)
		}
	}
	sidecar, _, err := packaging.Sidecar(&d.Spec.Template.Spec)
	if err != nil {
		t.Fatal(err)
	}
	// A partition group's members create a Lease per partition, named
	// after the group: --lease-name in the chart, which ships no Lease;
	// the kustomize example ships the base's Lease, whose name is the
	// group's (it reaches the sidecar as LEADER_ELECTOR_LEASE_NAME).
	partitions := 0
	if v, ok := packaging.FlagValue(sidecar.Args, "partitions"); ok {
		if partitions, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
		if name, ok := packaging.FlagValue(sidecar.Args, "lease-name"); ok {
			lease.Name = name
		} else if err := leases.OneInto("Lease", &lease); err != nil {
			t.Fatal(err)
		}
	} else if err := leases.OneInto("Lease", &lease); err != nil {
		t.Fatal(err)
	}
	dep := &deployment{
		name:       name,
		namespace:  d.Namespace,
		deployment: d.Name,
		service:    svc.Name,
		lease:      lease.Name,
		leaseDur:   15 * time.Second, // the sidecar's default
		retry:      2 * time.Second,  // the sidecar's default
		route:      "none",
		partitions: partitions,
		client:     theNode.Client(),
	}
	for _, u := range objs.OfKind("ValidatingAdmissionPolicy") {
		dep.policies = append(dep.policies, u.GetName())
	}
	for _, u := range objs.OfKind("ValidatingAdmissionPolicyBinding") {
		dep.bindings = append(dep.bindings, u.GetName())
	}
	if v, ok := packaging.FlagValue(sidecar.Args, "route"); ok {
		dep.route = v
	} else if v, ok := packaging.EnvValue(sidecar, "LEADER_ELECTOR_ROUTE"); ok {
		dep.route = v
	}
	if v, ok := packaging.FlagValue(sidecar.Args, "lease-duration"); ok {
		if dep.leaseDur, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := packaging.FlagValue(sidecar.Args, "retry-period"); ok {
		if dep.retry, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpState(t, dep)
		}
		dep.remove(t)
	})
	return dep
}

// remove deletes the cluster-scoped admission objects it installed (as helm
// uninstall does) and the namespace, and waits until its pods are gone, so
// the next test starts on an empty node.
func (d *deployment) remove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admission := d.client.AdmissionregistrationV1()
	for _, name := range d.bindings {
		if err := admission.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ValidatingAdmissionPolicyBinding %s: %v", name, err)
		}
	}
	for _, name := range d.policies {
		if err := admission.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ValidatingAdmissionPolicy %s: %v", name, err)
		}
	}
	if err := d.client.CoreV1().Namespaces().Delete(ctx, d.namespace, metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting namespace %s: %v", d.namespace, err)
		return
	}
	if err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := d.client.CoreV1().Namespaces().Get(ctx, d.namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Errorf("namespace %s still there after 2 minutes", d.namespace)
	}
}

// pods lists the Deployment's pods (by the selector the manifests set).
func (d *deployment) pods(ctx context.Context) ([]corev1.Pod, error) {
	dep, err := d.client.AppsV1().Deployments(d.namespace).Get(ctx, d.deployment, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel := metav1.FormatLabelSelector(dep.Spec.Selector)
	list, err := d.client.CoreV1().Pods(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

func names(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// readyEndpoints lists the pods the Service's EndpointSlices name as ready
// (the slices list unready pods too, with conditions.ready false).
func (d *deployment) readyEndpoints(ctx context.Context) ([]string, error) {
	list, err := d.client.DiscoveryV1().EndpointSlices(d.namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + d.service})
	if err != nil {
		return nil, err
	}
	return readyIn(list.Items), nil
}

func readyIn(slices []discoveryv1.EndpointSlice) []string {
	var ready []string
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready && e.TargetRef != nil {
				ready = append(ready, e.TargetRef.Name)
			}
		}
	}
	return ready
}

func (d *deployment) holder(ctx context.Context) (string, error) {
	l, err := d.client.CoordinationV1().Leases(d.namespace).Get(ctx, d.lease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if l.Spec.HolderIdentity == nil {
		return "", nil
	}
	return *l.Spec.HolderIdentity, nil
}

// serviceURL is the Service's ClusterIP address, reachable from the test's
// network namespace through kube-proxy's rules.
func (d *deployment) serviceURL(ctx context.Context) (string, error) {
	svc, err := d.client.CoreV1().Services(d.namespace).Get(ctx, d.service, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(svc.Spec.Ports) != 1 {
		return "", fmt.Errorf("service %s has %d ports, want 1", d.service, len(svc.Spec.Ports))
	}
	return fmt.Sprintf("http://%s:%d/", svc.Spec.ClusterIP, svc.Spec.Ports[0].Port), nil
}

// leaderState is one consistent look at the deployment: which pods are
// Ready, which the EndpointSlices list as ready, who holds the Lease.
type leaderState struct {
	readyPods, readyEndpoints []string
	holder                    string
	// labelled are the pods labelled as the leader ("true" on the chart's
	// routing.leaderLabel, which defaults to --leader-label's default).
	labelled []string
}

func (d *deployment) state(ctx context.Context) (leaderState, error) {
	var s leaderState
	pods, err := d.pods(ctx)
	if err != nil {
		return s, err
	}
	for i := range pods {
		if podReady(&pods[i]) {
			s.readyPods = append(s.readyPods, pods[i].Name)
		}
		if pods[i].Labels[routing.DefaultLeaderLabel] == "true" {
			s.labelled = append(s.labelled, pods[i].Name)
		}
	}
	if s.readyEndpoints, err = d.readyEndpoints(ctx); err != nil {
		return s, err
	}
	s.holder, err = d.holder(ctx)
	return s, err
}

// settled reports whether the Lease's holder is the Service's only ready
// endpoint and is Ready — and, when readiness is leadership, the only Ready
// pod; it returns that pod.
func (s leaderState) settled(routed bool) (string, bool) {
	if s.holder == "" || !slices.Equal(s.readyEndpoints, []string{s.holder}) || !slices.Contains(s.readyPods, s.holder) {
		return "", false
	}
	if !routed && len(s.readyPods) != 1 {
		return "", false
	}
	return s.holder, true
}

// waitSettled waits until one pod leads, is Ready and is the Service's only
// ready endpoint (see settled), and returns it.
func (d *deployment) waitSettled(t *testing.T, timeout time.Duration) string {
	t.Helper()
	return d.waitSettledExcept(t, timeout, "")
}

// waitSettledExcept is waitSettled for a leader other than pod (one being
// deleted or stopped, which may still be published for a moment).
func (d *deployment) waitSettledExcept(t *testing.T, timeout time.Duration, pod string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last leaderState
	var lastErr error
	for {
		s, err := d.state(ctx)
		if err == nil {
			if leader, ok := s.settled(d.routed()); ok && leader != pod {
				return leader
			}
			last = s
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: no settled leader after %v: ready pods %v, ready endpoints %v, lease holder %q (last error: %v)",
				d.name, timeout, last.readyPods, last.readyEndpoints, last.holder, lastErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// httpClient does not reuse connections: every request goes through
// kube-proxy's rules afresh, as a new client's would.
var httpClient = &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// ask sends one request to url and returns the answering pod's name (the
// demo app serves its pod name).
func ask(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, b)
	}
	return strings.TrimSpace(string(b)), nil
}
