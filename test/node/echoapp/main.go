// Command echoapp is the app of the forwarding proxy's real-node proof
// (test/e2e/node): an HTTP server that keeps its connections alive, as
// most apps do (busybox's httpd closes each one after its answer), and
// answers every request with its pod's name, the fencing token and
// isLeader its sidecar reports, so that the test can tell which term
// answered. GET /healthz answers ok. On SIGTERM it releases leadership
// (POST /release), then shuts down gracefully.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	address := flag.String("address", ":8081", "where to listen")
	flag.Parse()
	pod, sidecar := os.Getenv("POD_NAME"), os.Getenv("LEADER_ELECTOR_URL")
	client := &http.Client{Timeout: 2 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		var s struct {
			IsLeader     bool  `json:"isLeader"`
			FencingToken int64 `json:"fencingToken"`
		}
		resp, err := client.Get(sidecar + "/leader")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&s)
			_ = resp.Body.Close()
		}
		if err != nil {
			http.Error(w, "sidecar: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "%s %d %t\n", pod, s.FencingToken, s.IsLeader)
	})
	srv := &http.Server{Addr: *address, Handler: mux, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		// As an app behind the proxy should: hand leadership over first,
		// while it still serves (the sidecar drains its connections
		// within the term), then stop.
		// The sidecar answers after its drain (--proxy-drain): no short
		// timeout here, or the drain would be cut.
		releaser := &http.Client{Timeout: time.Minute}
		if resp, err := releaser.Post(sidecar+"/release", "", nil); err == nil {
			_ = resp.Body.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
