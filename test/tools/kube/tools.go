//go:build tools

// Package tools pins the Kubernetes commands that test/tools/build.sh builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
