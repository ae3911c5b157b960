//go:build tools

// Package tools pins the Kubernetes commands that test/tools/build.sh builds:
// the control plane for the e2e tests, kubectl for the commands the docs
// tell users to run, and the node components (kubelet,
// kube-proxy) plus kube-scheduler and kube-controller-manager for the tests
// on a real node (test/node).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
