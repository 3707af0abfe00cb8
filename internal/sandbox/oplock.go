package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// The operation lock: at most one pause, resume, fork or snapshot runs on a
// sandbox at a time (sandbox.op); a second one waits up to opWait, then gets 409.

// Operations in progress (sandbox.op).
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

// beginOp marks e busy with op, or returns a user error: 404 when e is
// gone, 409 when the state is wrong (wantPaused: the sandbox must be paused;
// otherwise running) or another operation does not finish within opWait.
func (e *Live) beginOp(ctx context.Context, op string, wantPaused bool) error {
	id := e.rec.ID
	deadline := time.Now().Add(opWait)
	for {
		e.mu.Lock()
		if e.gone {
			e.mu.Unlock()
			return notFound(id)
		}
		if e.op == "" {
			defer e.mu.Unlock()
			return e.beginLocked(op, wantPaused)
		}
		busy := e.op
		e.mu.Unlock()
		if time.Now().After(deadline) {
			return userErrorf(http.StatusConflict, "sandbox %q is %s", id, busy)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for sandbox %s (%s): %w", id, busy, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// beginLocked marks the idle sandbox e busy with op, or answers 409 when
// its state is wrong (wantPaused: it must be paused; otherwise running).
// e.mu must be held.
func (e *Live) beginLocked(op string, wantPaused bool) error {
	paused := e.rec.State == StatePaused
	switch {
	case wantPaused && !paused:
		return errRunning(e.rec.ID)
	case !wantPaused && paused:
		return userErrorf(http.StatusConflict, "sandbox %q is already paused", e.rec.ID)
	}
	e.op = op
	return nil
}

// endOp marks e idle again.
func (e *Live) endOp() {
	e.mu.Lock()
	e.op = ""
	e.mu.Unlock()
}

// inOp reports whether a pause, resume, fork or snapshot of e is in
// progress.
func (e *Live) inOp() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.op != ""
}

func isConflict(err error) bool {
	ue, ok := AsUserError(err)
	return ok && ue.Code == http.StatusConflict
}

const opForking = "forking"

const opSnapshotting = "snapshotting"
