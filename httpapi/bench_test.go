package httpapi

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
)

func benchState() leadership.State {
	now := time.Now()
	return leadership.State{
		Namespace: "default", Name: "my-app", Identity: "pod-a", Holder: "pod-a", IsLeader: true,
		FencingToken: 7, LeaseDurationSeconds: 15, RenewTime: now, LeaderSince: now, ValidUntil: now.Add(10 * time.Second), Revision: 12,
	}
}

// BenchmarkGetLeader measures the handler alone (no network): what one
// GET /leader costs the sidecar in CPU and allocations.
func BenchmarkGetLeader(b *testing.B) {
	h := NewAPIHandler(newFakeElection(benchState()), APIOptions{})
	req := httptest.NewRequest(http.MethodGet, "/leader", nil)
	req.Header.Set("Accept", "*/*")
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code)
		}
	}
}
