// Package leadershiptest has sample states of one Lease and a source of
// them that a test changes, for the unit tests of the packages that read
// leadership.State (httpapi, notify). Tests only: nothing that ships
// imports it (TestLayering).
package leadershiptest

import (
	"sync"
	"time"

	"github.com/leader-elector/leader-elector/leadership"
)

// The moments of the sample states: microsecond-exact where the API
// writes microseconds, so that an encoding's rounding shows.
var (
	RenewTime   = time.Date(2026, 11, 29, 8, 0, 0, 123456789, time.UTC)
	LeaderSince = time.Date(2026, 11, 29, 7, 58, 1, 0, time.UTC)
	ValidUntil  = time.Date(2026, 11, 29, 8, 0, 10, 123456000, time.UTC)
)

// Follower is a pod that follows my-app-7d9f-xyz12's term 7.
func Follower() leadership.State {
	return leadership.State{
		Namespace:            "default",
		Name:                 "my-app",
		Identity:             "my-app-7d9f-abcde",
		Holder:               "my-app-7d9f-xyz12",
		FencingToken:         7,
		LeaseDurationSeconds: 15,
		RenewTime:            RenewTime,
		Revision:             12,
	}
}

// Leader is the same pod leading term 7 until ValidUntil.
func Leader() leadership.State {
	s := Follower()
	s.Holder = s.Identity
	s.IsLeader = true
	s.LeaderSince = LeaderSince
	s.ValidUntil = ValidUntil
	s.Deadline = ValidUntil
	return s
}

// Source is an election whose state the test sets: Snapshot and Watch as
// the elector has them.
type Source struct {
	mu      sync.Mutex
	state   leadership.State
	changed chan struct{}
}

// NewSource returns a Source at s.
func NewSource(s leadership.State) *Source {
	return &Source{state: s, changed: make(chan struct{})}
}

// Snapshot returns the current state.
func (f *Source) Snapshot() leadership.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state
}

// Watch returns the current state and a channel closed at its next change.
func (f *Source) Watch() (leadership.State, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, f.changed
}

// Set changes the state, counts a revision and wakes the watchers, as the
// elector's tracker does; it never blocks.
func (f *Source) Set(change func(s *leadership.State)) leadership.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.state)
	f.state.Revision++
	close(f.changed)
	f.changed = make(chan struct{})
	return f.state
}
