package api

import (
	"encoding/json"
	"testing"
	"time"
)

func TestTimeJSON(t *testing.T) {
	at := time.Date(2026, 11, 29, 7, 58, 1, 0, time.FixedZone("CET", 3600))
	cases := []struct {
		name string
		in   Time
		want string
	}{
		{"whole seconds keep their zeros, in UTC", Time{at}, `"2026-11-29T06:58:01.000000Z"`},
		{"nanoseconds are cut to microseconds", Time{at.Add(123456789)}, `"2026-11-29T06:58:01.123456Z"`},
		{"zero is empty", Time{}, `""`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.in)
			if err != nil || string(b) != tc.want {
				t.Fatalf("Marshal = %s, %v; want %s", b, err, tc.want)
			}
			var back Time
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if want := tc.in.Truncate(time.Microsecond); !back.Equal(want) {
				t.Errorf("read back %v, want %v", back, want)
			}
		})
	}
}

func TestTimeReadsOtherRFC3339AndNull(t *testing.T) {
	var l Leader
	if err := json.Unmarshal([]byte(`{"leaderSince":"2026-11-29T08:00:00Z","validUntil":null}`), &l); err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC); !l.LeaderSince.Equal(want) || !l.ValidUntil.IsZero() {
		t.Errorf("got leaderSince %v, validUntil %v", l.LeaderSince, l.ValidUntil)
	}
	if err := json.Unmarshal([]byte(`{"validUntil":"yesterday"}`), &l); err == nil {
		t.Error("a time that is no RFC 3339 was accepted")
	}
}

// TestZeroTimesAreOmitted: renewTime, leaderSince and validUntil are left
// out until known, as docs/api.md says; an owned partition's are not, except
// drainDeadline, which is there only while it drains.
func TestZeroTimesAreOmitted(t *testing.T) {
	b, err := json.Marshal(Leader{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"lease":{"namespace":"","name":""},"identity":"","holder":"a","isLeader":false,"fencingToken":0,"leaseDurationSeconds":0,"revision":0,"degraded":false}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	b, err = json.Marshal(OwnedPartition{Partition: 2})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"partition":2,"fencingToken":0,"since":"","validUntil":"","draining":false}`; string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestErrorBody(t *testing.T) {
	b, err := json.Marshal(&Error{StatusCode: 409, Message: "not the leader"})
	if err != nil || string(b) != `{"error":"not the leader"}` {
		t.Errorf("Marshal = %s, %v", b, err)
	}
	if got, want := (&Error{StatusCode: 409, Message: "not the leader"}).Error(), "409 Conflict: not the leader"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
