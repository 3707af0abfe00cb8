package sandbox

import (
	"time"
)

// Observer is told about sandbox lifecycle events (metrics, audit). Calls
// are synchronous and must return quickly.
type Observer interface {
	// Created is called after a successful create, with the time it took.
	Created(sb *Sandbox, elapsed time.Duration)
	// CreateFailed is called when a create request fails (err may be a user
	// error, see AsUserError).
	CreateFailed(err error, elapsed time.Duration)
	// Removed is called after a sandbox was released (killed, expired, or
	// cleaned up after a failed create or a restart).
	Removed(id string)
	// Stopped is called when a running sandbox stopped on its own (reason
	// as from runtime.StopReasoner, "" when unknown), before it is released.
	Stopped(id, reason string)
}

type nopObserver struct{}

func (nopObserver) Created(*Sandbox, time.Duration)   {}
func (nopObserver) CreateFailed(error, time.Duration) {}
func (nopObserver) Removed(string)                    {}
func (nopObserver) Stopped(string, string)            {}

// observer returns the configured Observer (or a no-op one) together with
// the one that keeps sandbox events (events.go).
func (m *Manager) observer() Observer {
	if m.cfg.Observer == nil {
		return observers{nopObserver{}, eventsObserver{m.events}}
	}
	return observers{m.cfg.Observer, eventsObserver{m.events}}
}

// observers tells both, in order.
type observers [2]Observer

func (o observers) Created(sb *Sandbox, d time.Duration) {
	o[0].Created(sb, d)
	o[1].Created(sb, d)
}
func (o observers) CreateFailed(err error, d time.Duration) {
	o[0].CreateFailed(err, d)
	o[1].CreateFailed(err, d)
}
func (o observers) Removed(id string) { o[0].Removed(id); o[1].Removed(id) }
func (o observers) Stopped(id, reason string) {
	o[0].Stopped(id, reason)
	o[1].Stopped(id, reason)
}

// observeCreate reports the outcome of a Create call that began at start.
func (m *Manager) observeCreate(start time.Time, sb *Sandbox, err error) {
	if err != nil {
		m.observer().CreateFailed(err, time.Since(start))
		return
	}
	m.observer().Created(sb, time.Since(start))
}
