//go:build tools

// Package kcm pins kube-controller-manager; test/packaging/tools.sh builds it.
package kcm

import _ "k8s.io/kubernetes/cmd/kube-controller-manager"
