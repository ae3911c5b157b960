package supervisor

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

// TestDeadlineAfterWallStepBack: the sidecar's last renewal started at +0
// and its claim ends at +10 s on its monotonic clock (renew deadline 10 s,
// lease duration 15 s). The API server is unreachable, so there is no
// renewal after it; the node's wall clock steps back a minute; the
// supervisor's last answer from the still-claiming sidecar comes at +9 s,
// after which the sidecar dies. validUntil, read against the stepped wall
// clock, now looks 61 s ahead; validForMs says 1 s. The child must be
// killed before the claim's end, +10 s, not at +24 s (a lease duration
// after the answer) as the wall-clock arithmetic alone gives, 9 s after
// another pod may lead.
func TestDeadlineAfterWallStepBack(t *testing.T) {
	const (
		renewDeadline = 10 * time.Second
		leaseDuration = 15 * time.Second
		step          = 60 * time.Second
	)
	wall0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	renewStart := Mono(100 * time.Second)
	claimEnd := renewStart + Mono(renewDeadline)
	takeover := renewStart + Mono(leaseDuration)

	sent := renewStart + Mono(9*time.Second)
	written := sent + Mono(300*time.Microsecond)
	received := written + Mono(200*time.Microsecond)
	// The answer as the sidecar writes it: validUntil from the renewal's
	// start on the wall clock, validForMs from its monotonic deadline when
	// the answer is written (rounded down to the millisecond).
	body := []byte(`{"isLeader":true,"fencingToken":4,"leaseDurationSeconds":15,"revision":9,` +
		`"validUntil":"` + wall0.Add(renewDeadline).Format(api.TimeFormat) + `",` +
		`"validForMs":` + jsonInt(time.Duration(claimEnd-written).Milliseconds()) + `}`)
	var l api.Leader
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	o := Observation{SentWall: wall0.Add(9 * time.Second).Add(-step), SentMono: sent, RecvMono: received, Leader: l}
	d := Deadline(o)
	kill := d - Mono(killAhead)
	t.Logf("claim ends at +%v, another pod may lead from +%v; deadline +%v, kill at +%v",
		time.Duration(claimEnd-renewStart), time.Duration(takeover-renewStart), time.Duration(d-renewStart), time.Duration(kill-renewStart))
	if kill > claimEnd {
		t.Errorf("after a wall-clock step back the child is killed at +%v, after its claim ended at +%v (another pod may lead from +%v)",
			time.Duration(kill-renewStart), time.Duration(claimEnd-renewStart), time.Duration(takeover-renewStart))
	}
	if d < sent+Mono(time.Duration(claimEnd-written).Truncate(time.Millisecond)) {
		t.Errorf("deadline +%v is before what the answer allows", time.Duration(d-renewStart))
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
