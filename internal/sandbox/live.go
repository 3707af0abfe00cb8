package sandbox

import (
	"maps"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// A live sandbox as the manager indexes it (Manager.sandboxes), and the
// read-only view (Sandbox) handed to callers.

// entry is the manager's per-sandbox state; guarded by Manager.mu.
type entry struct {
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

// snapshot copies e into a Sandbox. m.mu must be held.
func snapshot(e *entry) *Sandbox {
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
func (e *entry) netNSPath(m *Manager) string {
	return filepath.Join(network.NetNSDir, m.cfg.NetNSPrefix+e.rec.ID)
}

// diskOnly reports whether e is paused without its memory. m.mu must be held.
func (e *entry) diskOnly() bool { return decodeExtra(e.rec.Extra).DiskOnly }
