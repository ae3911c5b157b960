package serverclock

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// secondsSinceEpoch is the clock's reading at t.
func secondsSinceEpoch(t time.Time) int64 { return int64(t.Sub(Epoch) / time.Second) }

// TestFromDateHeaders: the API server's clock is learned from
// the Date of its answers, the latest one replacing what was known.
func TestFromDateHeaders(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	sc := New(clk)
	if _, known := sc.Bound(); known {
		t.Fatal("known before any answer")
	}
	date := t0.Add(90 * time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", date.Format(http.TimeFormat))
	}))
	defer srv.Close()
	client := &http.Client{Transport: sc.WrapTransport(http.DefaultTransport)}
	for _, d := range []time.Time{t0.Add(90 * time.Second), t0.Add(30 * time.Second)} {
		date = d
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, known := sc.Bound(); !known || got != secondsSinceEpoch(d) {
			t.Errorf("after an answer dated %v: bound %d, %v; want %d", d, got, known, secondsSinceEpoch(d))
		}
	}
	clk.Step(100 * time.Second)
	if got, _ := sc.Bound(); got != secondsSinceEpoch(date)+99 {
		t.Errorf("100 s later: bound %d, want %d (elapsed less the drift allowance)", got, secondsSinceEpoch(date)+99)
	}
}
