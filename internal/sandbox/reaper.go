package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// DefaultReapInterval is how often Reap asks the runtime whether each live
// sandbox still runs.
const DefaultReapInterval = 3 * time.Second

// Reap watches live sandboxes until ctx ends. A sandbox whose runtime
// reports it stopped or unknown (its agent, PID 1, died — killed from inside,
// or the whole sandbox stopped by its memory limit) is released like a
// timed-out one, so the API reports it gone instead of "running" while
// every request to it fails.
func (m *Manager) Reap(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultReapInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.reapOnce(ctx)
	}
}

// reapOnce checks every live sandbox once and releases the dead ones.
func (m *Manager) reapOnce(ctx context.Context) {
	m.mu.Lock()
	live := make(map[string]*entry, len(m.sandboxes))
	for id, e := range m.sandboxes {
		if e.rec.State == StateRunning {
			live[id] = e
		}
	}
	m.mu.Unlock()
	for id, e := range live {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := m.cfg.Runtime.State(sctx, id)
		cancel()
		dead := errors.Is(err, runtime.ErrNotFound) || (err == nil && st == runtime.StateStopped)
		if !dead {
			continue
		}
		m.mu.Lock()
		cur, ok := m.sandboxes[id]
		if !ok || cur != e || m.closed {
			m.mu.Unlock()
			continue
		}
		delete(m.sandboxes, id)
		if e.timer != nil {
			e.timer.Stop()
		}
		m.bg.Add(1)
		m.mu.Unlock()
		m.log.Warn("sandbox stopped on its own (agent exited or memory limit); releasing it", "sandbox", id, "runtime_state", st, "err", err)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		if rerr := m.release(rctx, id, e.rec.Slot, m.sandboxDir(id)); rerr != nil {
			m.log.Error("releasing dead sandbox", "sandbox", id, "err", rerr)
		}
		rcancel()
		m.bg.Done()
	}
}
