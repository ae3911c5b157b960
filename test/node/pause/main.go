// Command pause is the pod sandbox image of the test node (test/node): it
// holds the pod's namespaces and waits to be stopped, like
// registry.k8s.io/pause, which cannot be pulled here.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	// As PID 1 of the pod's sandbox it also reaps zombies: SIGCHLD is not
	// ignored by default in Go, but a sandbox has no children of its own.
	<-stop
}
