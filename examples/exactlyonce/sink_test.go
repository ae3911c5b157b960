package exactlyonce

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
)

// The sink's conditional write, in memory and through its HTTP client: an
// offset it has is a no-op, a skipped one is refused, and after a Fence
// with a higher token the old owner's writes are refused.
func TestSinkFencesByTokenAndOffset(t *testing.T) {
	mem := NewMemorySink()
	srv := httptest.NewServer(mem.Handler())
	defer srv.Close()
	for name, s := range map[string]Sink{"memory": NewMemorySink(), "http": SinkClient{BaseURL: srv.URL, HTTP: srv.Client()}} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			mustApply := func(token, offset int64, want bool) {
				t.Helper()
				applied, err := s.Apply(ctx, 0, token, offset, "r")
				if err != nil || applied != want {
					t.Fatalf("Apply(token %d, offset %d) = %t, %v; want %t", token, offset, applied, err, want)
				}
			}
			mustApply(5, 1, true)
			mustApply(5, 2, true)
			mustApply(5, 2, false)
			if _, err := s.Apply(ctx, 0, 5, 4, "r"); !errors.Is(err, ErrGap) {
				t.Fatalf("a skipped offset: %v, want ErrGap", err)
			}
			if st, err := s.Fence(ctx, 0, 7); err != nil || st.Offset != 2 || st.Token != 7 {
				t.Fatalf("Fence(7) = %+v, %v", st, err)
			}
			// The old owner is refused from the new owner's Fence on,
			// even for an offset nobody has written yet.
			if _, err := s.Apply(ctx, 0, 5, 3, "late"); !errors.Is(err, ErrStaleToken) {
				t.Fatalf("a stale token's write: %v, want ErrStaleToken", err)
			}
			if _, err := s.Fence(ctx, 0, 6); !errors.Is(err, ErrStaleToken) {
				t.Fatalf("a stale token's fence: %v, want ErrStaleToken", err)
			}
			mustApply(7, 3, true)
		})
	}
	if st := mem.State(0); st.Refused != 2 || st.Token != 7 || st.Offset != 3 {
		t.Fatalf("state %+v", st)
	}
	if res := mem.Results(0); len(res) != 3 || res[2] != (Result{Offset: 3, Token: 7, Value: "r"}) {
		t.Fatalf("results %+v", res)
	}
}
