package sandbox

import (
	"maps"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// A live sandbox as the manager indexes it (Manager.sandboxes), the methods
// that act on one sandbox, and the read-only view (Sandbox) handed to
// callers.

// sandbox is one live sandbox: its record, its guest address, its expiry
// timer and its operation lock (op, oplock.go). Its fields are guarded by
// its manager's mu, the lock of the index.
type sandbox struct {
	m       *Manager // the manager whose index holds it
	rec     store.Sandbox
	guestIP netip.Addr
	timer   *time.Timer
	gen     uint64 // incremented whenever the timer is re-armed
	// op is the pause/resume/fork in progress ("" when idle); at most one
	// at a time per sandbox (oplock.go).
	op string
	// hidden sandboxes are internal (boot snapshots) and not listed.
	hidden bool
}

// view copies e into a Sandbox. m.mu must be held.
func (e *sandbox) view() *Sandbox {
	r := &e.rec
	x := decodeExtra(r.Extra)
	return &Sandbox{
		ID:            r.ID,
		TemplateID:    r.TemplateID,
		TemplateHash:  r.TemplateHash,
		Alias:         r.Alias,
		State:         r.State,
		GuestIP:       e.guestIP,
		AccessToken:   r.AccessToken,
		TrafficToken:  r.TrafficToken,
		Metadata:      maps.Clone(r.Metadata),
		EnvVars:       maps.Clone(r.EnvVars),
		AllowInternet: r.AllowInternet,
		CPUCount:      r.CPUCount,
		MemoryMB:      r.MemoryMB,
		DiskSizeMB:    r.DiskSizeMB,
		StartedAt:     r.StartedAt,
		EndAt:         r.EndAt,
		OnTimeout:     r.OnTimeout,
		AutoResume:    x.AutoResume,
		AllowOut:      x.AllowOut,
		DenyOut:       x.DenyOut,
		Transition:    e.op,
	}
}

// netNSPath is the sandbox's network namespace path. m.mu must be held.
func (e *sandbox) netNSPath() string {
	return filepath.Join(network.NetNSDir, e.m.cfg.NetNSPrefix+e.rec.ID)
}

// diskOnly reports whether e is paused without its memory. m.mu must be held.
func (e *sandbox) diskOnly() bool { return decodeExtra(e.rec.Extra).DiskOnly }

// indexed reports whether e is still the sandbox its id names (not killed
// or replaced meanwhile). m.mu must be held.
func (e *sandbox) indexed() bool { return e.m.sandboxes[e.rec.ID] == e }

// stopTimer stops e's expiry timer, if any. m.mu must be held.
func (e *sandbox) stopTimer() {
	if e.timer != nil {
		e.timer.Stop()
	}
}

// armLocked (re)starts e's expiry timer. m.mu must be held.
func (e *sandbox) armLocked() {
	e.stopTimer()
	e.gen++
	if e.rec.State == StatePaused {
		return // paused sandboxes do not expire
	}
	id, gen := e.rec.ID, e.gen
	e.timer = time.AfterFunc(time.Until(e.rec.EndAt), func() { e.m.expire(id, gen) })
}

// rearm restarts the timer of a sandbox whose pause was refused (unless it
// was removed meanwhile).
func (e *sandbox) rearm() {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	if e.indexed() {
		e.armLocked()
	}
}

// addr is e's guest address.
func (e *sandbox) addr() netip.Addr {
	e.m.mu.Lock()
	defer e.m.mu.Unlock()
	return e.guestIP
}
