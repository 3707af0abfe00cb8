package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// Creating a sandbox. Every strategy runs a list of named steps (steps.go;
// the names per strategy are in doc.go, "Forward steps"), each strategy top
// to bottom in its own file: the network, then the runtime (boot, or clone
// and restore a saved memory image), wait for the agent's /health, /init,
// and register (the store row, the index and the timer: register).
//
// Strategies, tried in this order by Create:
//   - create_snapshot.go: the templateID names a snapshot (createFromSnapshot);
//   - create_restore.go: the template has a boot snapshot: a warm-pool
//     sandbox is claimed (pool.go) or the boot snapshot restored
//     (createFromBoot); fork children (fork.go) take the same path;
//   - create_cold.go: everything else boots the template (createCold).

// Create starts a new sandbox and returns it once its agent is initialised.
// Any failure undoes everything already set up.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (sb *Sandbox, err error) {
	defer func(begin time.Time) { m.observeCreate(begin, sb, err) }(time.Now())
	defer func() { err = mountUserError(err, req.VolumeMounts) }()
	m.creates.add(1) // teardowns yield to creates (teardown.go)
	defer m.creates.add(-1)
	if req.TemplateID == "" {
		req.TemplateID = "base"
	}
	if req.Timeout <= 0 {
		return nil, userErrorf(http.StatusBadRequest, "timeout must be positive")
	}
	if req.Timeout > m.cfg.MaxTimeout {
		return nil, userErrorf(http.StatusBadRequest, "timeout cannot be greater than %d seconds", int(m.cfg.MaxTimeout.Seconds()))
	}
	if req.AutoPause && req.AutoPauseDiskOnly {
		if _, err := m.rebooter(); err != nil {
			return nil, err
		}
	} else if req.AutoPause || req.AutoResume {
		if _, err := m.checkpointer(); err != nil {
			return nil, err
		}
	}
	if err := m.checkRulesRuntime(req.NetworkRules); err != nil { // cabundle.go
		return nil, err
	}
	allowInternet := true
	if req.AllowInternet != nil {
		allowInternet = *req.AllowInternet
	}
	if _, err := m.runtimeMounts(ctx, req.VolumeMounts); err != nil { // refused before any setup
		return nil, err
	}
	tpl, err := m.resolveTemplate(ctx, req)
	if errors.Is(err, ErrTemplateNotFound) {
		if snap := m.lookupSnapshot(ctx, req.TemplateID); snap != nil && req.RootFS == "" {
			return m.createFromSnapshot(ctx, snap, req, allowInternet)
		}
		return nil, userErrorf(http.StatusNotFound, "template '%s' not found", req.TemplateID)
	}
	if err != nil {
		return nil, fmt.Errorf("resolving template %q: %w", req.TemplateID, err)
	}
	// Template defaults (Dockerfile templates may set CPU/memory) apply
	// where the request names none; then the daemon defaults and bounds.
	if req.Limits.CPUCount == 0 {
		req.Limits.CPUCount = tpl.CPUCount
	}
	if req.Limits.MemoryMB == 0 {
		req.Limits.MemoryMB = tpl.MemoryMB
	}
	if req.Limits, err = m.resolveLimits(req.Limits); err != nil {
		return nil, err
	}
	if err := m.CheckHostDisk(); err != nil {
		return nil, err
	}
	if m.cfg.Admit != nil {
		release, err := m.cfg.Admit(req.Limits)
		if err != nil {
			return nil, err
		}
		defer release()
	}
	if sb, ok := m.createFromBoot(ctx, tpl, req, allowInternet); ok { // the warm pool or the boot snapshot
		return sb, nil
	}
	return m.createCold(ctx, tpl, req, allowInternet)
}

// register makes a started sandbox with an initialised agent live: its
// store row, its place in the index and its timer. what names it in a
// store error ("sandbox", "restored sandbox").
func (m *Manager) register(ctx context.Context, rec *store.Sandbox, ip netip.Addr, hidden bool, what string) (*Sandbox, error) {
	if err := m.cfg.Store.PutSandbox(ctx, rec); err != nil {
		return nil, fmt.Errorf("saving %s: %w", what, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, userErrorf(http.StatusServiceUnavailable, "server is shutting down")
	}
	e := m.newLive(rec, ip, hidden)
	m.sandboxes[rec.ID] = e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.armLocked()
	return e.view(), nil
}

// resolveTemplate resolves req's template, or wraps req.RootFS.
func (m *Manager) resolveTemplate(ctx context.Context, req CreateRequest) (*Template, error) {
	if req.RootFS != "" {
		return &Template{Name: req.TemplateID, RootFS: req.RootFS}, nil
	}
	return m.cfg.Templates.Resolve(ctx, req.TemplateID)
}
