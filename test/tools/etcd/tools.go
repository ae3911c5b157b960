//go:build tools

// Package tools pins the etcd server that test/tools/build.sh builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
