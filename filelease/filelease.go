// Package filelease serves the part of the Kubernetes API the sidecar
// uses — /version and the Leases of a namespace: get, list, watch, create,
// update, delete — from a file, inside the process, for
// --lease-store=file:PATH: candidates on one machine elect through the
// file, with no API server.
//
// It serves the API rather than give the elector a narrower interface of
// its own, so that everything above the Lease client runs unchanged on it:
// the elector and its cache, fencing tokens, release and acquire, the
// campaign, health gating (its second Lease), SSE and the supervisor. The
// semantics the elector relies on are the API server's: a resourceVersion
// that only grows, 409 Conflict on a stale update, watches that resume
// from a resourceVersion (or answer 410 Gone), watch lists
// (sendInitialEvents), and a Date header on every answer (the server's
// clock, see package serverclock).
//
// The file: PATH holds every Lease and the store's resourceVersion (JSON);
// PATH.hwm the highest resourceVersion and fencing token ever written: a
// PATH deleted starts again above them, a PATH replaced by an older copy
// or truncated is refused with one clear error until it is deleted. A
// write syncs both as temporary files, then holds an exclusive flock of
// PATH.lock only to check that no other write came first and to rename
// them into place (see store.update); a reader needs no lock. flock is
// local to one machine: the store is for candidates on a single host only.
//
// Other processes' writes are seen through inotify on PATH's directory,
// and a read every second besides.
package filelease

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// Start serves the store at path inside this process until stop is
// called, and returns the client configuration that reaches it. The
// connections are in-memory pipes: nothing listens on a port or a socket,
// so no other process can reach this API. path's directory must exist; a
// records file that cannot be used is refused here, with the reason.
func Start(ctx context.Context, path string) (cfg *rest.Config, stop func(), err error) {
	if path == "" {
		return nil, nil, errors.New("the lease file's path is empty")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, nil, fmt.Errorf("lease file %q: %w", path, err)
	}
	if info, err := os.Stat(filepath.Dir(abs)); err != nil || !info.IsDir() {
		return nil, nil, fmt.Errorf("lease file %s: its directory does not exist", abs)
	}
	s := newServer(abs, klog.FromContext(ctx).WithName("filelease"))
	if _, err := s.refresh(ctx); err != nil {
		return nil, nil, err
	}
	return s.serve(ctx)
}

// serve runs s behind an in-memory listener.
func (s *Server) serve(ctx context.Context) (*rest.Config, func(), error) {
	l := newPipeListener()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	// The server outlives ctx: at shutdown the elector releases the Lease
	// after ctx has ended; stop ends it.
	followCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		s.follow(followCtx)
	}()
	go func() { _ = srv.Serve(l) }()
	// stop returns once nothing of the store touches its directory any
	// more: a read in flight takes the lock file, and a caller may remove
	// the directory next (a test's TempDir does).
	stop := func() {
		cancel()
		_ = srv.Close()
		<-followed
	}
	cfg := &rest.Config{
		Host: "http://" + pipeAddr{}.String(),
		Dial: l.dial,
		// JSON only: the store decodes no protobuf.
		ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"},
	}
	return cfg, stop, nil
}

// pipeListener hands the server the far ends of the pipes its dial makes.
type pipeListener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

// dial is the client's net.Dial: a new in-memory pipe to the server.
func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
	case <-ctx.Done():
	}
	client.Close()
	server.Close()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return nil, errors.New("the file lease store has stopped")
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "lease-file.invalid" }
