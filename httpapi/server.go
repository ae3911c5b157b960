package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is an http.Server with every timeout set, bound before it serves so
// that a port already in use is reported at startup.
type Server struct {
	srv *http.Server
	ln  net.Listener
	// streams ends long-polls and SSE streams when shutting down: without
	// it Shutdown would wait for the long-polls until its own deadline, and
	// would not wait for the streams at all.
	streams *streamGroup
}

// Listen binds addr and prepares a server for h. baseCtx carries the logger
// into handlers.
func Listen(baseCtx context.Context, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	streamCtx, stop := context.WithCancel(context.WithoutCancel(baseCtx))
	streams := newStreamGroup(streamCtx.Done(), stop)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// Long-polls and SSE extend their own write deadline.
		WriteTimeout:   15 * time.Second,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 16 << 10,
		BaseContext:    func(net.Listener) context.Context { return context.WithValue(streamCtx, streamGroupKey{}, streams) },
	}
	return &Server{srv: srv, ln: ln, streams: streams}, nil
}

// streamGroup follows the event streams of one server: they outlive their
// requests (they leave net/http, see stream), so the server's Shutdown
// does not see them; it tells them through the group and waits for them
// to send their last event and close.
type streamGroup struct {
	// shutdown is closed when the server starts to shut down.
	shutdown <-chan struct{}
	stopAll  context.CancelFunc

	mu       sync.Mutex
	running  int
	stopping bool
	// idle is closed once the server is stopping and no stream runs.
	idle chan struct{}
}

func newStreamGroup(shutdown <-chan struct{}, stopAll context.CancelFunc) *streamGroup {
	return &streamGroup{shutdown: shutdown, stopAll: stopAll, idle: make(chan struct{})}
}

// start counts a new stream in; false if the server is shutting down.
func (g *streamGroup) start() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		return false
	}
	g.running++
	return true
}

// done counts a stream out.
func (g *streamGroup) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	if g.running == 0 && g.stopping {
		close(g.idle)
	}
}

// stop tells every stream (and long-poll) to end; the channel it returns
// is closed once no stream runs.
func (g *streamGroup) stop() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopping {
		g.stopping = true
		g.stopAll()
		if g.running == 0 {
			close(g.idle)
		}
	}
	return g.idle
}

type streamGroupKey struct{}

// streamGroupOf returns the streams of the Server that serves the request
// (nil if it is not a Server's: its streams then end only when their client
// goes away).
func streamGroupOf(ctx context.Context) *streamGroup {
	g, _ := ctx.Value(streamGroupKey{}).(*streamGroup)
	return g
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown; it returns nil after a clean shutdown.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown ends open streams and waits for in-flight requests, and for the
// streams to send their last event, until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	idle := s.streams.stop()
	if err := s.srv.Shutdown(ctx); err != nil {
		return err
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
