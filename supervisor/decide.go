package supervisor

import (
	"os"
	"syscall"
	"time"
)

// The supervisor's loop is split in two. decide holds every rule: given
// what the supervisor knows (state), what just happened (an event) and the
// time, it returns what the supervisor knows next and what to do (actions),
// touching no process and reading no clock, so that its tests run on a fake
// clock without processes (decide_test.go). The loop (supervisor.go) only
// gathers events and carries out the actions.

// rules is the configuration decide applies.
type rules struct {
	hasCommand     bool
	stopGrace      time.Duration
	startDelay     time.Duration
	onExit         string
	restartBackoff time.Duration
	// partition: partition mode's term-bound supervisor (partition.go).
	partition bool
}

func rulesOf(cfg Config) rules {
	return rules{
		hasCommand:     len(cfg.Command) > 0,
		stopGrace:      cfg.StopGrace,
		startDelay:     cfg.StartDelay,
		onExit:         cfg.OnExit,
		restartBackoff: cfg.RestartBackoff,
		partition:      cfg.Partition != nil,
	}
}

// state is what the supervisor knows.
type state struct {
	term Term
	// child is the running child (nil: none).
	child *childState
	// restartAt is the earliest moment a child may start: the term's
	// start + --start-delay, or the restart back-off.
	restartAt Mono
	// backoff is the next restart's delay.
	backoff time.Duration
	// shutdown: SIGTERM or SIGINT was received.
	shutdown bool
	// checked: --stop-grace was checked against a claim.
	checked bool
	// hookLeading is the claim as the hooks were last told of it.
	hookLeading bool
}

// childState is what decide knows of one run of the child.
type childState struct {
	token   int64
	started Mono
	// killAt is the SIGKILL moment: the claim's end − killAhead, or
	// --stop-grace after a stop if that is sooner.
	killAt Mono
	// armed is the deadline the watchdog holds.
	armed    Mono
	stopping bool
	killed   bool
	// draining: stopped for a drain, which gives it until the drain's
	// deadline while the term goes on; ended: the term it ran in is over,
	// or the supervisor is stopping, since it was stopped.
	draining, ended bool
}

func (r rules) initial() state { return state{backoff: r.restartBackoff} }

// Events: what the loop gathers.
type (
	event interface{ isEvent() }
	// wake: the timer fired, or the loop begins.
	wake struct{}
	// observed: an answer of GET /leader (or its failure).
	observed struct{ o Observation }
	// childExited: the child exited; the watchdog is finished.
	childExited struct {
		pid, code int
		// result says how it ended ("exit code 3", "killed by SIGKILL").
		result string
		// fired: the watchdog killed the group at its deadline.
		fired bool
	}
	// signaled: the supervisor received a signal.
	signaled struct{ sig os.Signal }
	// orphaned: SIGCHLD, an orphan below the supervisor may have exited.
	orphaned struct{}
	// cancelled: the context of Run ended (only an embedding caller).
	cancelled struct{}
)

func (wake) isEvent()        {}
func (observed) isEvent()    {}
func (childExited) isEvent() {}
func (signaled) isEvent()    {}
func (orphaned) isEvent()    {}
func (cancelled) isEvent()   {}

// Actions: what the loop carries out, in order.
type (
	action interface{ isAction() }
	// note logs msg with its key/values; an error line if isError.
	note struct {
		msg     string
		kv      []any
		isError bool
	}
	// fireHook queues --on-start-leading (leading) or --on-stop-leading.
	fireHook struct {
		leading bool
		term    Term
	}
	// startChild starts the watchdog, then the child, for term; if it
	// cannot, the supervisor exits with the code the failure maps to.
	startChild struct {
		term Term
		now  Mono
	}
	// armWatchdog hands the watchdog a new deadline.
	armWatchdog struct{ at Mono }
	// stopChild sends sig to the child's tree (its group, and what left
	// it, each process once); killIn is what --stop-grace leaves.
	stopChild struct {
		sig    syscall.Signal
		reason string
		killIn time.Duration
	}
	// killChild SIGKILLs the child's group and tree: the claim ends.
	killChild struct{}
	// killRemains SIGKILLs what the exited child left behind.
	killRemains struct{}
	// reapOrphaned reaps the orphans that exited.
	reapOrphaned struct{}
	// forward sends sig to the child.
	forward struct{ sig os.Signal }
	// release asks the sidecar to release the leadership (in partition
	// mode: the partition, in the supervisor's term).
	release struct{}
	// abort kills the child at once and waits for it.
	abort struct{}
	// exit ends the supervisor with code.
	exit struct{ code int }
)

func (note) isAction()         {}
func (fireHook) isAction()     {}
func (startChild) isAction()   {}
func (armWatchdog) isAction()  {}
func (stopChild) isAction()    {}
func (killChild) isAction()    {}
func (killRemains) isAction()  {}
func (reapOrphaned) isAction() {}
func (forward) isAction()      {}
func (release) isAction()      {}
func (abort) isAction()        {}
func (exit) isAction()         {}

func info(msg string, kv ...any) note { return note{msg: msg, kv: kv} }

// decide takes ev at now and returns the next state and the actions. An
// exit action, if any, is the last.
func (r rules) decide(s state, ev event, now Mono) (state, []action) {
	if s.child != nil {
		c := *s.child // s is a value; so is what it knows of the child
		s.child = &c
	}
	var acts []action
	switch ev := ev.(type) {
	case observed:
		acts = r.onObserved(&s, ev.o, now)
	case childExited:
		var done bool
		acts, done = r.onChildExited(&s, ev, now)
		if done {
			return s, acts
		}
	case signaled:
		acts = r.onSignal(&s, ev.sig, now)
	case orphaned:
		acts = []action{reapOrphaned{}}
	case cancelled:
		if s.child != nil {
			acts = append(acts, abort{})
		}
		return s, append(acts, exit{ExitRuntimeError})
	}
	return s, append(acts, r.apply(&s, now)...)
}

func (r rules) onObserved(s *state, o Observation, now Mono) []action {
	if !s.term.Observe(o) {
		return nil
	}
	if !s.term.Leading {
		return []action{info("This pod does not lead", "holder", s.term.Leader.Holder)}
	}
	s.backoff, s.restartAt = r.restartBackoff, now+Mono(r.startDelay)
	return []action{info("This pod leads; the child starts after --start-delay",
		"fencingToken", s.term.Token, "validUntil", s.term.Leader.ValidUntil.UTC(), "startDelay", r.startDelay)}
}

// onChildExited applies the on-exit policy; done: the supervisor exits.
func (r rules) onChildExited(s *state, ev childExited, now Mono) (acts []action, done bool) {
	c := s.child
	s.child = nil
	ran := time.Duration(now - c.started)
	acts = []action{
		info("Child exited", "pid", ev.pid, "result", ev.result, "ran", ran.Round(time.Millisecond)),
		// Whatever it started goes with it, in its group or not.
		killRemains{},
	}
	stopped := c.stopping || c.killed
	if !stopped && ev.fired {
		// The watchdog killed it at the end of the last claim the
		// supervisor knew of: the supervisor was paused. That is a stop,
		// not the child's own exit; it starts again if the claim is
		// renewed.
		acts = append(acts, info("The watchdog killed the child at the end of the claim: the supervisor was paused"))
		stopped = true
	}
	if r.partition && (stopped || s.shutdown || r.onExit != OnExitRestart) {
		// The term's work is over (stopped: drained, lost, run out; or
		// the child gave up): hand the partition back now that the
		// child is gone, which acknowledges a drain, and end. A stop
		// was the supervisor's, so it ends as a success.
		code := ev.code
		if stopped && !s.shutdown {
			code = 0
		}
		return append(acts, release{}, exit{code}), true
	}
	switch {
	case s.shutdown:
		return append(acts, exit{ev.code}), true
	case stopped:
		return acts, false
	case r.onExit == OnExitRelease:
		return append(acts, release{}, exit{ev.code}), true
	case r.onExit == OnExitExit:
		return append(acts, exit{ev.code}), true
	}
	// restart: back off, doubling while the child keeps exiting soon after
	// it starts; a run longer than the cap resets it.
	if ran > maxRestartBackoff {
		s.backoff = r.restartBackoff
	}
	s.restartAt = now + Mono(s.backoff)
	acts = append(acts, info("Restarting the child if this pod still leads (--on-exit=restart)", "in", s.backoff))
	s.backoff = min(2*s.backoff, maxRestartBackoff)
	return acts, false
}

// onSignal: SIGTERM and SIGINT stop the child and then the supervisor;
// any other signal is the child's.
func (r rules) onSignal(s *state, sig os.Signal, now Mono) []action {
	c := s.child
	if sig != syscall.SIGTERM && sig != syscall.SIGINT {
		if c != nil && !c.killed {
			return []action{forward{sig}}
		}
		return nil
	}
	var acts []action
	if !s.shutdown {
		acts = append(acts, info("Stopping on a signal", "signal", signalName(sig)))
	}
	s.shutdown = true
	if c != nil && !c.killed && !c.stopping {
		acts = append(acts, r.stop(c, sig.(syscall.Signal), now, "the supervisor is stopping")...)
	}
	return acts
}

// apply holds the rules that hold at every moment, whatever happened:
// hooks follow the claim, a child starts on a valid claim and stops when
// it ends.
func (r rules) apply(s *state, now Mono) []action {
	var acts []action
	// Hooks follow the claim as the supervisor knows it: it begins with a
	// term, and ends when the sidecar says so or when it runs out
	// unrenewed.
	// (Partition mode has no hooks: Validate refuses them.)
	if valid := s.term.Valid(now) && !s.shutdown; valid != s.hookLeading && !r.partition {
		s.hookLeading = valid
		acts = append(acts, fireHook{leading: valid, term: s.term})
	}
	if s.child == nil && s.shutdown {
		return append(acts, exit{0})
	}
	if r.partition && s.child == nil && s.term.known && (!s.term.Valid(now) || s.term.Draining) {
		// The term ended, or began draining, before a child ran (or
		// between restarts): nothing is left to supervise. A drain is
		// acknowledged at once.
		if s.term.Valid(now) {
			acts = append(acts, release{})
		}
		return append(acts, info("The partition's term is over; nothing to supervise"), exit{0})
	}
	if r.hasCommand && s.child == nil && s.term.Valid(now) && now >= s.restartAt {
		start, refuse := r.startOnClaim(s, now)
		acts = append(acts, start...)
		if refuse {
			return acts
		}
	}
	if s.child != nil && !s.child.killed {
		acts = append(acts, r.bound(s, now)...)
	}
	return acts
}

// startOnClaim starts a child on the valid claim, if what is left of it
// exceeds --stop-grace + killAhead. The first claim that shows the renew
// deadline checks --stop-grace against it; refuse: it does not fit.
func (r rules) startOnClaim(s *state, now Mono) (acts []action, refuse bool) {
	if rd := RenewDeadline(s.term.Leader); !s.checked && rd > 0 {
		s.checked = true
		if r.stopGrace+killAhead >= rd {
			return []action{
				note{msg: "The --stop-grace does not fit in the claim: give one well below the sidecar's renew deadline (validUntil − renewTime); the child is killed 100ms before the claim ends",
					kv: []any{"stopGrace", r.stopGrace, "renewDeadline", rd.Round(time.Millisecond)}, isError: true},
				exit{ExitBadInput},
			}, true
		}
	}
	if time.Duration(s.term.Deadline-now) <= r.stopGrace+killAhead {
		return nil, false
	}
	killAt := s.term.Deadline - Mono(killAhead)
	s.child = &childState{token: s.term.Token, started: now, killAt: killAt, armed: killAt}
	return []action{startChild{term: s.term, now: now}}, false
}

// bound keeps the running child within its claim: the SIGKILL moment
// follows the claim's renewals while this pod leads in the child's term;
// SIGTERM when the term ends or --stop-grace before the claim does;
// SIGKILL at the SIGKILL moment.
func (r rules) bound(s *state, now Mono) []action {
	c := s.child
	var acts []action
	own := s.term.Leading && s.term.Token == c.token
	switch {
	case own && !c.stopping && !s.shutdown:
		c.killAt = s.term.Deadline - Mono(killAhead)
	case own && c.draining && !c.ended && !s.shutdown:
		// A drain's child has until the drain's deadline, as long as the
		// claim's renewals cover it.
		c.killAt = min(s.term.Deadline, s.term.DrainBy) - Mono(killAhead)
	case c.stopping && !c.ended && (!own || s.shutdown):
		// Stopped with more time than --stop-grace (a drain), and then
		// the term ended (the partition released, at the drain's
		// deadline or the sidecar's shutdown) or the supervisor began to
		// stop: --stop-grace from now, as after any other stop, so that
		// it is dead before the next owner's --start-delay has passed.
		c.ended = true
		c.killAt = min(c.killAt, now+Mono(r.stopGrace))
	}
	if !c.stopping {
		reason, by := "", now+Mono(r.stopGrace)
		switch {
		case !s.term.Leading:
			reason = "this pod stopped leading"
		case s.term.Token != c.token:
			reason = "a new term began"
		case s.term.Draining:
			// The child has until the drain's deadline, when the
			// sidecar releases the partition anyway.
			reason, by = "the partition is draining", max(min(s.term.Deadline, s.term.DrainBy)-Mono(killAhead), now)
			c.draining = true
		case now >= c.killAt-Mono(r.stopGrace):
			reason = "the claim ends within --stop-grace and was not renewed"
		}
		if reason != "" {
			acts = append(acts, stopBy(c, syscall.SIGTERM, now, by, reason)...)
		}
	}
	acts = append(acts, arm(c)...)
	if now >= c.killAt {
		c.killed = true
		acts = append(acts, killChild{})
	}
	return acts
}

// stop sends sig to the child and gives it --stop-grace, never beyond the
// claim.
func (r rules) stop(c *childState, sig syscall.Signal, now Mono, reason string) []action {
	return stopBy(c, sig, now, now+Mono(r.stopGrace), reason)
}

// stopBy sends sig to the child and SIGKILLs it at by, never beyond the
// claim.
func stopBy(c *childState, sig syscall.Signal, now, by Mono, reason string) []action {
	c.stopping = true
	c.killAt = min(c.killAt, by)
	// The watchdog holds the earlier deadline before the signal goes.
	return append(arm(c), stopChild{sig: sig, reason: reason, killIn: time.Duration(c.killAt - now)})
}

// arm hands the watchdog the child's SIGKILL moment if it holds another.
func arm(c *childState) []action {
	if c.armed == c.killAt {
		return nil
	}
	c.armed = c.killAt
	return []action{armWatchdog{c.killAt}}
}

// wakeAt is when the loop must decide again without an event: the next
// SIGTERM or SIGKILL moment, the restart, or the claim's end for the
// hooks; -1: none.
func (r rules) wakeAt(s state, now Mono) Mono {
	next := Mono(-1)
	if c := s.child; c != nil && !c.killed {
		next = c.killAt
		if !c.stopping {
			next = c.killAt - Mono(r.stopGrace)
		}
	}
	if s.child == nil && s.restartAt > now {
		next = s.restartAt
	}
	if s.hookLeading && (next < 0 || s.term.Deadline < next) {
		next = s.term.Deadline
	}
	return next
}
