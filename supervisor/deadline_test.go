package supervisor

import (
	"errors"
	"testing"
	"time"

	"github.com/leader-elector/leader-elector/api"
)

var wall0 = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func leading(token int64, rev uint64, validUntil time.Time) api.Leader {
	return api.Leader{IsLeader: true, FencingToken: token, Revision: rev, LeaseDurationSeconds: 15, ValidUntil: api.Time{Time: validUntil}}
}

func TestDeadline(t *testing.T) {
	sent := Mono(100 * time.Second)
	for _, tc := range []struct {
		name string
		o    Observation
		want Mono
	}{
		{"the claim's remaining time from the send moment", Observation{SentWall: wall0, SentMono: sent, Leader: leading(1, 1, wall0.Add(7*time.Second))}, sent + Mono(7*time.Second)},
		{"microseconds survive", Observation{SentWall: wall0, SentMono: sent, Leader: leading(1, 1, wall0.Add(1234567*time.Microsecond))}, sent + Mono(1234567*time.Microsecond)},
		{"a claim already over gives the send moment", Observation{SentWall: wall0, SentMono: sent, Leader: leading(1, 1, wall0.Add(-time.Second))}, sent},
		{"a wall clock stepped back is capped at a lease duration", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent, Leader: leading(1, 1, wall0.Add(time.Hour))}, sent + Mono(15*time.Second)},
		{"the cap counts from the answer's arrival: a long-poll answered 20 s after it was sent", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(20*time.Second), Leader: leading(1, 1, wall0.Add(30*time.Second))}, sent + Mono(30*time.Second)},
		{"a late answer is capped from its arrival", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(20*time.Second), Leader: leading(1, 1, wall0.Add(time.Hour))}, sent + Mono(35*time.Second)},
		{"not leading extends nothing", Observation{SentWall: wall0, SentMono: sent, Leader: api.Leader{Revision: 2, ValidUntil: api.Time{Time: wall0.Add(time.Hour)}}}, sent},
		{"a failed read extends nothing", Observation{SentWall: wall0, SentMono: sent, Leader: leading(1, 1, wall0.Add(7*time.Second)), Err: errors.New("timeout")}, sent},
		{"leading without validUntil extends nothing", Observation{SentWall: wall0, SentMono: sent, Leader: api.Leader{IsLeader: true, FencingToken: 1}}, sent},
		{"validForMs: the wall clock's exact moment inside the window", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(2*time.Millisecond), Leader: validFor(leading(1, 1, wall0.Add(7*time.Second)), 6999)}, sent + Mono(7*time.Second)},
		{"validForMs: a wall clock stepped back is clamped to the answer's arrival + validForMs", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(2*time.Millisecond), Leader: validFor(leading(1, 1, wall0.Add(time.Hour)), 6999)}, sent + Mono(2*time.Millisecond+6999*time.Millisecond)},
		{"validForMs: a wall clock stepped forward is clamped to the send + validForMs", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(2*time.Millisecond), Leader: validFor(leading(1, 1, wall0.Add(-time.Hour)), 6999)}, sent + Mono(6999*time.Millisecond)},
		{"validForMs: a long-poll written 20 s after it was sent keeps the wall clock's moment", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(20*time.Second), Leader: validFor(leading(1, 1, wall0.Add(30*time.Second)), 10000)}, sent + Mono(30*time.Second)},
		{"validForMs without validUntil: the send + validForMs", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent + Mono(time.Second), Leader: validFor(api.Leader{IsLeader: true, FencingToken: 1, LeaseDurationSeconds: 15}, 5000)}, sent + Mono(5*time.Second)},
		{"validForMs is bounded by the lease duration", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent, Leader: validFor(leading(1, 1, wall0.Add(time.Hour)), 1<<62)}, sent + Mono(15*time.Second)},
		{"a negative validForMs extends nothing", Observation{SentWall: wall0, SentMono: sent, RecvMono: sent, Leader: validFor(leading(1, 1, wall0.Add(time.Hour)), -5)}, sent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Deadline(tc.o); got != tc.want {
				t.Errorf("Deadline = %v, want %v", time.Duration(got), time.Duration(tc.want))
			}
		})
	}
}

func validFor(l api.Leader, ms int64) api.Leader {
	l.ValidForMs = &ms
	return l
}

func TestDeadlineUsesTheSendMomentOnBothClocks(t *testing.T) {
	// The wall clock and the monotonic clock are read together when the
	// request is sent; a slow answer (here 3 s) does not move the deadline
	// later: it is validUntil's offset from the send, on the monotonic clock.
	o := Observation{SentWall: wall0, SentMono: Mono(50 * time.Second), Leader: leading(4, 9, wall0.Add(10*time.Second))}
	if got, want := Deadline(o), Mono(60*time.Second); got != want {
		t.Fatalf("Deadline = %v, want %v", time.Duration(got), time.Duration(want))
	}
}

func at(sec int, l api.Leader) Observation {
	return Observation{SentWall: wall0.Add(time.Duration(sec) * time.Second), SentMono: Mono(time.Duration(sec) * time.Second), Leader: l}
}

func TestTermObserve(t *testing.T) {
	var term Term
	if term.Valid(0) {
		t.Fatal("an empty term is valid")
	}
	// Becomes leader: a change.
	if !term.Observe(at(0, leading(5, 10, wall0.Add(10*time.Second)))) {
		t.Fatal("becoming leader is not a change")
	}
	if term.Deadline != Mono(10*time.Second) || !term.Valid(Mono(9*time.Second)) || term.Valid(Mono(10*time.Second)) {
		t.Fatalf("deadline %v", time.Duration(term.Deadline))
	}
	// A renewal (same revision, later validUntil) extends, and is no change.
	if term.Observe(at(2, leading(5, 10, wall0.Add(12*time.Second)))) {
		t.Fatal("a renewal is a change")
	}
	if term.Deadline != Mono(12*time.Second) {
		t.Fatalf("renewal: deadline %v, want 12s", time.Duration(term.Deadline))
	}
	// A late answer of the same term with an earlier validUntil keeps the later deadline.
	term.Observe(at(1, leading(5, 10, wall0.Add(11*time.Second))))
	if term.Deadline != Mono(12*time.Second) {
		t.Fatalf("late answer moved the deadline back to %v", time.Duration(term.Deadline))
	}
	// A failed read changes nothing.
	if term.Observe(Observation{SentMono: Mono(20 * time.Second), Err: errors.New("refused")}) || term.Deadline != Mono(12*time.Second) || !term.Leading {
		t.Fatal("a failed read changed the term")
	}
	// Losing: a change.
	if !term.Observe(at(3, api.Leader{Revision: 11, Holder: "other"})) || term.Leading || term.Valid(Mono(4*time.Second)) {
		t.Fatal("losing is not a change, or the term stays valid")
	}
	// An older answer (a long-poll answered late) is ignored.
	if term.Observe(at(2, leading(5, 10, wall0.Add(13*time.Second)))) || term.Leading {
		t.Fatal("an answer of an older revision was taken")
	}
	// A new term: a change, with its own deadline even if earlier.
	term.Observe(at(30, leading(6, 12, wall0.Add(40*time.Second))))
	if !term.Leading || term.Token != 6 || term.Deadline != Mono(40*time.Second) {
		t.Fatalf("new term: %+v", term)
	}
	if !term.Observe(at(31, leading(7, 13, wall0.Add(35*time.Second)))) || term.Deadline != Mono(35*time.Second) {
		t.Fatalf("another term did not take its own deadline: %v", time.Duration(term.Deadline))
	}
}

func TestRenewDeadline(t *testing.T) {
	l := leading(1, 1, wall0.Add(10*time.Second))
	l.RenewTime = api.Time{Time: wall0.Add(123 * time.Microsecond)}
	if got, want := RenewDeadline(l), 10*time.Second-123*time.Microsecond; got != want {
		t.Fatalf("RenewDeadline = %v, want %v", got, want)
	}
	l.RenewTime = api.Time{}
	if got := RenewDeadline(l); got != 0 {
		t.Fatalf("without renewTime: %v, want 0", got)
	}
}
