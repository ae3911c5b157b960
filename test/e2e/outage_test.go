//go:build integration

package e2e

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestAPIServerOutage: the API server is frozen (SIGSTOP: connections hang)
// and then killed and restarted (connections refused). Each time the leader
// steps down within the renew deadline, nobody claims leadership during the
// outage, a leader is elected again afterwards, and no process dies.
//
// It runs last-ish by name order only by accident; it leaves the shared
// control plane running when it ends.
func TestAPIServerOutage(t *testing.T) {
	g := newGroup(t, 3, candidateOptions{})

	outages := []struct {
		name  string
		begin func() error
		end   func() error
	}{
		{
			name:  "frozen",
			begin: controlPlane.FreezeAPIServer,
			end:   controlPlane.ThawAPIServer,
		},
		{
			name:  "killed and restarted",
			begin: controlPlane.KillAPIServer,
			end: func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				return controlPlane.StartAPIServer(ctx)
			},
		},
	}
	for _, o := range outages {
		leader := g.WaitLeader(giveUp)
		began := time.Now()
		if err := o.begin(); err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		restored := false
		t.Cleanup(func() {
			if !restored {
				_ = o.end()
			}
		})

		// The leader stops claiming within the renew deadline of its last
		// renewal, which started before the outage began.
		var steppedDown time.Duration
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, giveUp, true, func(context.Context) (bool, error) {
			s, err := leader.state()
			if err != nil {
				return false, err
			}
			steppedDown = time.Since(began)
			return !s.IsLeader, nil
		})
		if err != nil {
			t.Fatalf("%s: leader %s did not step down: %v", o.name, leader.name, err)
		}
		// Judged from what the leader answered, not from when the poll
		// above happened to run: no claim was valid past the deadline, and
		// no request sent after it was answered "leader".
		limit := began.Add(renewDeadline)
		for _, a := range g.monitor.leaderAnswers(began, time.Now()) {
			if a.state.ValidUntil.After(limit) {
				t.Errorf("%s: %s claimed validity until %s, past the outage start + renew deadline (%s)", o.name, a.who, stamp(a.state.ValidUntil.Time), stamp(limit))
			}
			if a.sent.After(limit) {
				t.Errorf("%s: %s answered isLeader to a request sent at %s, after the outage start + renew deadline (%s)", o.name, a.who, stamp(a.sent), stamp(limit))
			}
		}

		// Hold the outage well past the lease duration: nobody may claim.
		quietFrom := time.Now()
		time.Sleep(leaseDuration + 2*e2eSlack)
		quietTo := time.Now()
		if claims := g.monitor.leaderAnswers(quietFrom, quietTo); len(claims) > 0 {
			t.Errorf("%s: %d leadership claims during the outage, first by %s at %s", o.name, len(claims), claims[0].who, stamp(claims[0].sent))
		}

		if err := o.end(); err != nil {
			t.Fatalf("%s: restore: %v", o.name, err)
		}
		restored = true
		back := time.Now()
		next := g.WaitLeader(giveUp)
		t.Logf("MEASURED API server %s: leader %s stepped down %v after the outage began; %s leads %v after the API server came back",
			o.name, leader.name, steppedDown.Round(time.Millisecond), next.name, time.Since(back).Round(time.Millisecond))
		for _, c := range g.Members() {
			if !c.running() {
				t.Errorf("%s: %s exited during the outage", o.name, c.name)
			}
		}
	}
}
