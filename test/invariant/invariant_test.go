package invariant

import (
	"strings"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

func TestChecker(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	leader := func(who string, since, sent int, token int64) Answer {
		return Answer{Who: who, Sent: at(sent), IsLeader: true, FencingToken: token, LeaderSince: at(since), ValidUntil: at(sent + 1000)}
	}
	cases := []struct {
		name    string
		answers []Answer
		want    string // "" for no violation
	}{
		{"handover in order", []Answer{leader("a", 0, 100, 1), leader("a", 0, 200, 1), leader("b", 300, 400, 2)}, ""},
		{"overlapping claims", []Answer{leader("a", 0, 500, 1), leader("b", 300, 400, 2)}, "split brain"},
		{"same token for a new holder", []Answer{leader("a", 0, 100, 1), leader("b", 300, 400, 1)}, "did not grow"},
		{"same token for the same holder's next claim", []Answer{leader("a", 0, 100, 1), leader("a", 300, 400, 1)}, "did not grow"},
		{"token goes back for one candidate", []Answer{{Who: "c", Sent: at(0), FencingToken: 5}, {Who: "c", Sent: at(10), FencingToken: 4}}, "go back"},
		{"claim past validUntil", []Answer{{Who: "a", Sent: at(100), IsLeader: true, LeaderSince: at(0), ValidUntil: at(50)}}, "past its validity"},
		{"nothing observed", nil, "observed nothing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := New(true)
			for _, a := range tc.answers {
				c.Record(a)
			}
			r := c.Check()
			got := strings.Join(r.Violations, "\n")
			if tc.want == "" && r.Count() != 0 {
				t.Errorf("unexpected violations: %s", got)
			}
			if tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("violations %q, want one mentioning %q", got, tc.want)
			}
		})
	}
}

func TestPartitions(t *testing.T) {
	base := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	sent := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
	at := func(s float64) api.Time { return api.Time{Time: sent(s)} }
	p := NewPartitions()
	// Partition 0 moves from a to b with a growing token; partition 1 is
	// claimed by a and b at once, and b's token goes back.
	p.Record("a", sent(1), []api.OwnedPartition{{Partition: 0, FencingToken: 1, Since: at(0), ValidUntil: at(3)}, {Partition: 1, FencingToken: 5, Since: at(0), ValidUntil: at(3)}})
	p.Record("b", sent(2), []api.OwnedPartition{{Partition: 1, FencingToken: 4, Since: at(0.5), ValidUntil: at(4)}})
	p.Record("b", sent(5), []api.OwnedPartition{{Partition: 0, FencingToken: 2, Since: at(4), ValidUntil: at(7)}})
	r := p.Check(3)
	want := []string{"partition 1: split brain", "partition 1: fencing token did not grow", "owners of 2 partitions seen, want all 3"}
	if r.Count() != len(want) {
		t.Fatalf("violations %q, want %d: %q", r.Violations, len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(r.Violations[i], w) {
			t.Errorf("violation %d = %q, want it to start with %q", i, r.Violations[i], w)
		}
	}
}
