package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// DefaultWatchInterval is how often Watch looks for sandboxes that stopped
// on their own.
const DefaultWatchInterval = 2 * time.Second

// tombstoneTTL is how long the reason a sandbox stopped is remembered.
const tombstoneTTL = time.Hour

// tombstones remembers why sandboxes stopped on their own, so later requests
// for them get a clear 404. The zero value is ready to use.
type tombstones struct {
	// mu guards m and suspects.
	mu sync.Mutex
	m  map[string]tombstone
	// suspects were seen not running by the previous ReapStopped.
	suspects map[string]bool
}

func (t *tombstones) wasSuspect(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.suspects[id]
}

func (t *tombstones) setSuspects(s map[string]bool) {
	t.mu.Lock()
	t.suspects = s
	t.mu.Unlock()
}

type tombstone struct {
	msg string
	at  time.Time
}

func (t *tombstones) add(id, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]tombstone{}
	}
	now := time.Now()
	for k, v := range t.m {
		if now.Sub(v.at) > tombstoneTTL {
			delete(t.m, k)
		}
	}
	t.m[id] = tombstone{msg: msg, at: now}
}

func (t *tombstones) get(id string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ts, ok := t.m[id]
	if !ok || time.Since(ts.at) > tombstoneTTL {
		return "", false
	}
	return ts.msg, true
}

// notFound is the 404 for id, saying why when the sandbox stopped on its
// own.
func (m *Manager) notFound(id string) *Error {
	if msg, ok := m.dead.get(id); ok {
		return userErrorf(http.StatusNotFound, "%s", msg)
	}
	return notFound(id)
}

// Watch looks for running sandboxes that stopped on their own (e.g. killed
// for exceeding their memory limit) every interval until ctx is done.
func (m *Manager) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := m.ReapStopped(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("checking for stopped sandboxes", "err", err)
		}
	}
}

// ReapStopped releases every live sandbox the runtime no longer runs and
// remembers why it stopped. To never remove a healthy sandbox on a transient
// misreading (a state file being rewritten while listed), a sandbox must be
// seen stopped by two consecutive calls and confirmed by Runtime.State. It
// returns the first error reading states.
func (m *Manager) ReapStopped(ctx context.Context) error {
	states, err := m.runtimeStates(ctx)
	if err != nil {
		return err
	}
	m.reapStopped(ctx, states)
	return nil
}

// reapStopped is ReapStopped over states already read from the runtime.
func (m *Manager) reapStopped(ctx context.Context, states map[string]runtime.State) {
	suspects := map[string]bool{}
	for _, sb := range m.List() {
		if sb.State != StateRunning {
			continue
		}
		if st, ok := states[sb.ID]; ok && st == runtime.StateRunning {
			continue
		}
		e, err := m.Lookup(sb.ID)
		if err != nil {
			continue // removed meanwhile
		}
		if e.inOp() {
			// Pause and fork stop the runtime sandbox on purpose while
			// they checkpoint it; it is not a suspect.
			continue
		}
		suspects[sb.ID] = true
		if !m.dead.wasSuspect(sb.ID) {
			continue // first sighting: check again next time
		}
		st, err := m.cfg.Runtime.State(ctx, sb.ID)
		if err == nil && st != runtime.StateStopped {
			continue
		}
		if err != nil && !errors.Is(err, runtime.ErrNotFound) {
			m.log.Warn("confirming sandbox state", "sandbox", sb.ID, "err", err)
			continue
		}
		e.reap(ctx, sb)
	}
	m.dead.setSuspects(suspects)
}

// runtimeStates reads the state of every sandbox the runtime holds.
func (m *Manager) runtimeStates(ctx context.Context) (map[string]runtime.State, error) {
	if sl := m.caps.StateLister; sl != nil {
		return sl.States(ctx)
	}
	out := map[string]runtime.State{}
	for _, sb := range m.List() {
		st, err := m.cfg.Runtime.State(ctx, sb.ID)
		if errors.Is(err, runtime.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading state of %s: %w", sb.ID, err)
		}
		out[sb.ID] = st
	}
	return out, nil
}

// reap removes e, which stopped on its own (sb is its view), unless it was
// killed, paused or taken by an operation meanwhile.
func (e *Live) reap(ctx context.Context, sb *Sandbox) {
	m := e.m
	reason := ""
	if sr := m.caps.StopReasoner; sr != nil {
		reason = sr.StopReason(sb.ID)
	}
	m.mu.Lock()
	e.mu.Lock()
	if e.gone || e.rec.State != StateRunning || e.op != "" {
		e.mu.Unlock()
		m.mu.Unlock()
		return
	}
	delete(m.sandboxes, sb.ID)
	e.gone = true
	e.stopTimer()
	e.mu.Unlock()
	m.mu.Unlock()

	msg := fmt.Sprintf("sandbox %q stopped unexpectedly and was removed", sb.ID)
	if reason != "" {
		msg = fmt.Sprintf("sandbox %q was stopped because %s (%d MiB) and was removed", sb.ID, reason, sb.MemoryMB)
		if reason != "it exceeded its memory limit" {
			msg = fmt.Sprintf("sandbox %q was stopped because %s and was removed", sb.ID, reason)
		}
	}
	m.dead.add(sb.ID, msg)
	m.log.Warn("sandbox stopped on its own", "sandbox", sb.ID, "reason", reason)
	m.observer().Stopped(sb.ID, reason)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := e.release(rctx); err != nil {
		m.log.Error("releasing stopped sandbox", "sandbox", sb.ID, "err", err)
	}
}
