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
	suspects := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// One runtime listing per pass serves both checks.
		states, err := m.runtimeStates(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Warn("checking for stopped sandboxes", "err", err)
			}
			continue
		}
		// Sandboxes that stopped on their own: released with the reason
		// recorded (watch.go; two sightings plus a confirmation).
		m.reapStopped(ctx, states)
		suspects = m.reapOrphans(ctx, suspects, states)
	}
}

// reapOrphans destroys runtime sandboxes this manager does not know: neither
// live nor being created. They appear when the daemon was SIGKILLed while a
// create was in flight: the runtime's own process (runsc) outlives the daemon
// and may finish starting the sandbox after the next daemon's Restore already
// ran. An id is destroyed only when it was an orphan on two consecutive
// passes. It returns this pass's orphans.
func (m *Manager) reapOrphans(ctx context.Context, prev map[string]bool, states map[string]runtime.State) map[string]bool {
	var ids []string
	if m.caps.StateLister != nil {
		// states already lists every sandbox the runtime holds.
		for id := range states {
			ids = append(ids, id)
		}
	} else {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		ids, err = m.cfg.Runtime.List(lctx)
		cancel()
		if err != nil {
			m.log.Warn("listing runtime sandboxes for orphans", "err", err)
			return prev
		}
	}
	m.mu.Lock()
	known := make(map[string]bool, len(m.sandboxes)+len(m.slots))
	for id := range m.sandboxes {
		known[id] = true
	}
	for _, id := range m.slots {
		known[id] = true
	}
	closed := m.closed
	m.mu.Unlock()
	orphans := map[string]bool{}
	if closed {
		return orphans
	}
	for _, id := range ids {
		if known[id] {
			continue
		}
		if !prev[id] {
			orphans[id] = true
			continue
		}
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		err := errors.Join(m.cfg.Runtime.Destroy(dctx, id, m.sandboxDir(id)), m.cfg.Network.Teardown(dctx, id, -1))
		dcancel()
		if err != nil {
			m.log.Error("destroying orphaned runtime sandbox", "sandbox", id, "err", err)
			orphans[id] = true // retry next pass
			continue
		}
		m.log.Warn("orphaned runtime sandbox destroyed (a create interrupted by a daemon crash)", "sandbox", id)
	}
	return orphans
}
