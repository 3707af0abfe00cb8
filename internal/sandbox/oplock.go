package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The operation lock: at most one pause, resume, fork or snapshot runs on a
// sandbox at a time (entry.op); a second one waits up to opWait, then gets 409.

// Operations in progress (entry.op).
const (
	opPausing  = "pausing"
	opResuming = "resuming"
)

// errRunning is the conflict returned by Resume for a running sandbox.
func errRunning(id string) *Error {
	return userErrorf(http.StatusConflict, "sandbox %q is already running", id)
}

func isConflictRunning(err error, id string) bool {
	ue, ok := AsUserError(err)
	return ok && ue.Code == http.StatusConflict && ue.Msg == errRunning(id).Msg
}

// opWait bounds how long an operation waits for another one on the same
// sandbox (e.g. a fork parent still being restored) to finish.
const opWait = 30 * time.Second

// beginOp marks id busy with op and returns its entry, or a user error: 404
// unknown, 409 when the state is wrong (wantPaused: the sandbox must be
// paused; otherwise running) or another operation does not finish within
// opWait.
func (m *Manager) beginOp(ctx context.Context, id, op string, wantPaused bool) (*entry, error) {
	deadline := time.Now().Add(opWait)
	for {
		m.mu.Lock()
		e, ok := m.sandboxes[id]
		if !ok {
			m.mu.Unlock()
			return nil, notFound(id)
		}
		if e.op == "" {
			defer m.mu.Unlock()
			paused := e.rec.State == StatePaused
			switch {
			case wantPaused && !paused:
				return nil, errRunning(id)
			case !wantPaused && paused:
				return nil, userErrorf(http.StatusConflict, "sandbox %q is already paused", id)
			}
			e.op = op
			return e, nil
		}
		busy := e.op
		m.mu.Unlock()
		if time.Now().After(deadline) {
			return nil, userErrorf(http.StatusConflict, "sandbox %q is %s", id, busy)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for sandbox %s (%s): %w", id, busy, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (m *Manager) endOp(e *entry) {
	m.mu.Lock()
	e.op = ""
	m.mu.Unlock()
}

func isConflict(err error) bool {
	ue, ok := AsUserError(err)
	return ok && ue.Code == http.StatusConflict
}

const opForking = "forking"

const opSnapshotting = "snapshotting"
