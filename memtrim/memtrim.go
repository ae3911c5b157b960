// Package memtrim gives the kernel back the pages of the executable that
// the process touched while starting and does not use again.
//
// The sidecar's binary is mostly client-go's: the init functions of every
// k8s.io/api group run at start (client-go's scheme registers them all,
// whether the sidecar uses them or not), and with the kernel's fault-around
// they map about 15 MiB of the binary's code and read-only data, which then
// count in the process's VmRSS and, as page cache charged to the container,
// in the working set the kubelet reports. At rest the sidecar runs a small
// fraction of that code. Trim drops the process's mapping of those pages;
// the pages the sidecar still runs come back on their next use, from the
// page cache, like any page of a program that was never touched.
package memtrim

import "errors"

// ErrUnsupported is returned where the kernel offers no way to drop the
// executable's pages (any system but Linux).
var ErrUnsupported = errors.New("dropping the executable's pages is supported on Linux only")

// Result is what Trim did.
type Result struct {
	// Bytes is the size of the executable's read-only mappings it advised.
	Bytes uint64
}
