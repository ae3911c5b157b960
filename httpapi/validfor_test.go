package httpapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/leader-elector/leader-elector/api"
	"github.com/leader-elector/leader-elector/leadership"
)

// TestValidForMs: an answer of a leader carries the milliseconds left of
// its claim when the answer is written (rounded down, 0 once it has run
// out), measured from the state's Deadline on the API's clock, also when
// the state, and so its cached encoding, did not change. A follower's
// answer and the events carry none.
func TestValidForMs(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(validUntil.Add(-2500*time.Millisecond - 700*time.Microsecond))
	el := newFakeElection(leaderState())
	h := NewAPIHandler(el, APIOptions{Clock: clk})
	get := func() api.Leader {
		t.Helper()
		w := serve(h, newRequest(t, http.MethodGet, "/leader"))
		var l api.Leader
		decodeInto(t, w, &l)
		return l
	}
	for _, step := range []struct {
		advance time.Duration
		want    int64
	}{{0, 2500}, {time.Second, 1500}, {1500 * time.Millisecond, 0}, {time.Hour, 0}} {
		clk.SetTime(clk.Now().Add(step.advance))
		if l := get(); l.ValidForMs == nil || *l.ValidForMs != step.want {
			t.Fatalf("%v later: validForMs %v, want %d", step.advance, l.ValidForMs, step.want)
		}
	}

	clk.SetTime(validUntil.Add(-time.Second))
	el.acquire = func(context.Context, leadership.AcquireOptions) (leadership.State, bool, error) {
		return el.Snapshot(), true, nil
	}
	w := serve(h, newRequest(t, http.MethodPost, "/acquire"))
	var a api.Acquire
	decodeInto(t, w, &a)
	if a.ValidForMs == nil || *a.ValidForMs != 1000 {
		t.Errorf("POST /acquire: validForMs %v, want 1000", a.ValidForMs)
	}

	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			if !strings.Contains(line, `"isLeader":true`) || strings.Contains(line, "validForMs") {
				t.Errorf("a leader's event %q, want one without validForMs", line)
			}
			break
		}
	}

	el.set(func(s *leadership.State) { *s = followerState() })
	if l := get(); l.ValidForMs != nil {
		t.Errorf("a follower's answer has validForMs %d", *l.ValidForMs)
	}
}

func decodeInto(t *testing.T, w *httptest.ResponseRecorder, v any) {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if err := jsonUnmarshalStrict(w.Body.Bytes(), v); err != nil {
		t.Fatalf("%s: %v", w.Body, err)
	}
}

// jsonUnmarshalStrict decodes one JSON value with no unknown fields.
func jsonUnmarshalStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
