package httpapi

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestNetHTTPPlainTextErrors pins the answers Go's HTTP server gives itself,
// before any handler runs, which therefore cannot be JSON: docs/security.md
// lists them. If this fails, Go changed them: update the docs.
func TestNetHTTPPlainTextErrors(t *testing.T) {
	srv, err := Listen(context.Background(), "127.0.0.1:0", NewAPIHandler(newFakeElection(leaderState()), APIOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	for _, tc := range []struct {
		name        string
		request     string
		wantStatus  int
		contentType string // "" for none
	}{
		{"headers over MaxHeaderBytes", "GET /leader HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 21<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge, "text/plain; charset=utf-8"},
		{"header line without a colon", "GET /leader HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", http.StatusBadRequest, "text/plain; charset=utf-8"},
		{"invalid header name", "GET /leader HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", http.StatusBadRequest, "text/plain; charset=utf-8"},
		{"HTTP/1.1 without Host", "GET /leader HTTP/1.1\r\n\r\n", http.StatusBadRequest, "text/plain; charset=utf-8"},
		{"request target that is no URL", "GET %zz HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest, "text/plain; charset=utf-8"},
		{"malformed request line", "GET\r\nHost: x\r\n\r\n", http.StatusBadRequest, "text/plain; charset=utf-8"},
		{"unsupported protocol version", "GET /leader HTTP/3.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported, "text/plain; charset=utf-8"},
		{"unsupported transfer encoding", "POST /release HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", http.StatusNotImplemented, "text/plain; charset=utf-8"},
		{"unsupported expectation", "GET /leader HTTP/1.1\r\nHost: x\r\nExpect: tea\r\n\r\n", http.StatusExpectationFailed, ""},
		// The handler's own answer, for contrast: a malformed query is JSON.
		{"malformed query string", "GET /leader?%zz HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusBadRequest, "application/json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.DialTimeout("tcp", srv.Addr(), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tc.request); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.wantStatus || resp.Header.Get("Content-Type") != tc.contentType {
				t.Errorf("%d %q, want %d %q", resp.StatusCode, resp.Header.Get("Content-Type"), tc.wantStatus, tc.contentType)
			}
		})
	}
}
