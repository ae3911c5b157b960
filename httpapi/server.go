package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Server is an http.Server with every timeout set, bound before it serves so
// that a port already in use is reported at startup.
type Server struct {
	srv *http.Server
	ln  net.Listener
	// stopStreams ends long-polls and SSE streams when shutting down; without
	// it Shutdown would wait for them until its own deadline.
	stopStreams context.CancelFunc
}

// Listen binds addr and prepares a server for h. baseCtx carries the logger
// into handlers.
func Listen(baseCtx context.Context, addr string, h http.Handler) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	streamCtx, stop := context.WithCancel(context.WithoutCancel(baseCtx))
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		// Long-polls and SSE extend their own write deadline.
		WriteTimeout:   15 * time.Second,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 16 << 10,
		BaseContext:    func(net.Listener) context.Context { return streamCtx },
	}
	return &Server{srv: srv, ln: ln, stopStreams: stop}, nil
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

// Shutdown ends open streams and waits for in-flight requests until ctx ends.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopStreams()
	return s.srv.Shutdown(ctx)
}
