package routing

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
)

// controllerLabels are the unprefixed label keys that Kubernetes controllers
// set on the pods they own (and select them by). Written out because
// k8s.io/api has constants for some of them only, and apimachinery's
// validation knows none.
var controllerLabels = map[string]string{
	appsv1.DefaultDeploymentUniqueLabelKey: "the Deployment controller",
	appsv1.ControllerRevisionHashLabelKey:  "the StatefulSet and DaemonSet controllers",
	"pod-template-generation":              "the DaemonSet controller",
	"controller-uid":                       "the Job controller",
	"job-name":                             "the Job controller",
}

// reservedPrefixes are the label prefixes Kubernetes reserves for itself,
// with their subdomains (statefulset.kubernetes.io/, apps.kubernetes.io/…).
var reservedPrefixes = []string{"kubernetes.io", "k8s.io"}

// ReservedLabel says why key cannot be the leader label, or "" if it can:
// a label Kubernetes controllers set on their pods, or one under a prefix
// Kubernetes reserves. Label mode rewrites the leader label on every pod of
// the group, so such a key would take each pod from its controller, which
// would then create another, without end.
func ReservedLabel(key string) string {
	if who, ok := controllerLabels[key]; ok {
		return "a label " + who + " sets on its pods"
	}
	prefix, _, found := strings.Cut(key, "/")
	if !found {
		return ""
	}
	for _, reserved := range reservedPrefixes {
		if prefix == reserved || strings.HasSuffix(prefix, "."+reserved) {
			return "its prefix " + prefix + "/ is reserved for Kubernetes"
		}
	}
	return ""
}
