package sandbox

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Pause checkpoints the running sandbox: its memory and processes are
// saved to <dir>/checkpoint, its writable layer (disk.img) and network
// namespace are kept, and it stops using CPU and memory. 409 when already
// paused or busy, 404 gone, 501 when the runtime cannot checkpoint.
func (e *Live) Pause(ctx context.Context) error { return e.pauseOp(ctx, false) }

// PauseFilesystem pauses the running sandbox keeping only its disk
// (pausedisk.go). 409 when already paused or busy, 404 gone, 501 when the
// runtime cannot.
func (e *Live) PauseFilesystem(ctx context.Context) error { return e.pauseOp(ctx, true) }

func (e *Live) pauseOp(ctx context.Context, diskOnly bool) error {
	if err := e.beginOp(ctx, opPausing, false); err != nil {
		return err
	}
	defer e.endOp()
	return e.pauseKind(ctx, diskOnly)
}

// pauseKind pauses e, already marked busy, with its memory or (diskOnly)
// without, or answers 501 when the runtime cannot.
func (e *Live) pauseKind(ctx context.Context, diskOnly bool) error {
	m := e.m
	if diskOnly {
		rb, err := m.rebooter()
		if err != nil {
			return err
		}
		return e.pauseDisk(ctx, rb)
	}
	cp, err := m.checkpointer()
	if err != nil {
		return err
	}
	return e.pause(ctx, cp)
}

// pause does the work of Pause for e, already marked busy.
func (e *Live) pause(ctx context.Context, cp runtime.Checkpointer) error {
	m, id := e.m, e.rec.ID
	if err := e.checkPauseSpace(ctx); err != nil {
		return err // nothing done: the sandbox keeps running
	}
	start := time.Now()
	e.mu.Lock()
	e.stopTimer()
	e.gen++ // a timer that already fired is ignored
	e.mu.Unlock()

	st, step, err := e.checkpointLive(ctx, cp, "a checkpoint")
	if err != nil {
		switch step {
		case checkpointFreeze: // the sandbox keeps running
			e.rearm()
		case checkpointStop:
			return hostDiskFull(fmt.Errorf("pausing sandbox %s (the sandbox was stopped): %w", id, err),
				fmt.Sprintf("pausing sandbox %s failed and the sandbox was stopped", id))
		}
		return err
	}
	if err := e.commit(ctx, "paused state", func() { e.rec.State = StatePaused }); err != nil {
		return err
	}
	m.log.Info("sandbox paused", "sandbox", id, "freeze", st.freeze, "elapsed", time.Since(start), "aborted_conns", st.aborted)
	return nil
}

// pauseOnTimeout pauses a sandbox whose lifecycle says "pause" when its
// timeout fires; if that fails the sandbox is removed.
func (e *Live) pauseOnTimeout() {
	m, id := e.m, e.rec.ID
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+opWait)
	defer cancel()
	if err := e.beginOp(ctx, opPausing, false); err != nil {
		m.log.Info("timeout pause skipped", "sandbox", id, "reason", err)
		return
	}
	defer e.endOp()
	e.mu.Lock()
	diskOnly := decodeExtra(e.rec.Extra).PauseDiskOnly
	e.mu.Unlock()
	m.log.Info("sandbox timed out; pausing", "sandbox", id, "keep_memory", !diskOnly)
	err := e.pauseKind(ctx, diskOnly)
	if err == nil {
		return
	}
	m.log.Error("pausing timed-out sandbox; killing it", "sandbox", id, "err", err)
	if m.unindex(e) {
		if err := e.release(ctx); err != nil {
			m.log.Error("killing sandbox after a failed timeout pause", "sandbox", id, "err", err)
		}
	}
}

// Resume restores the paused sandbox from its checkpoint and makes it
// expire timeout from now. 409 when it is running, 404 gone.
func (e *Live) Resume(ctx context.Context, timeout time.Duration) (*Sandbox, error) {
	m, id := e.m, e.rec.ID
	if err := m.CheckTimeout(timeout); err != nil {
		return nil, err
	}
	if err := e.beginOp(ctx, opResuming, true); err != nil {
		return nil, err
	}
	defer e.endOp()
	e.mu.Lock()
	diskOnly := e.diskOnly()
	e.mu.Unlock()
	if diskOnly {
		return e.resumeDisk(ctx, timeout)
	}
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	restored, err := e.restoreInPlace(ctx, cp)
	if err != nil {
		// Left paused: the image is still there and Restore deletes the
		// half-started container before trying again.
		return nil, err
	}
	if err := os.RemoveAll(m.imageDir(id)); err != nil {
		m.log.Warn("removing checkpoint after resume", "sandbox", id, "err", err)
	}
	sb, err := e.commitRunning(ctx, timeout, func() {})
	if err != nil {
		return nil, err
	}
	m.log.Info("sandbox resumed", "sandbox", id, "restore", restored, "elapsed", time.Since(start))
	return sb, nil
}

// reattachPaused registers a paused sandbox found in the store at startup
// (no timer: paused sandboxes do not expire). False if its slot is taken.
func (m *Manager) reattachPaused(row *store.Sandbox, ip netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if owner, used := m.slots[row.Slot]; used && owner != row.ID {
		return false
	}
	m.slots[row.Slot] = row.ID
	m.sandboxes[row.ID] = m.newLive(row, ip, false)
	return true
}

// AutoResumeTimeout is the timeout given to a sandbox resumed by traffic.
const AutoResumeTimeout = 5 * time.Minute

// EnsureRunning is used by the proxy: it returns the sandbox when running;
// a paused sandbox created with autoResume is resumed (or, when a resume is
// already in progress, waited for). Otherwise it returns a user error.
func (e *Live) EnsureRunning(ctx context.Context) (*Sandbox, error) {
	id := e.rec.ID
	for {
		e.mu.Lock()
		gone, sb := e.gone, e.view()
		e.mu.Unlock()
		if gone {
			return nil, e.m.notFound(id)
		}
		switch {
		case sb.State == StateRunning && sb.Transition == "":
			return sb, nil
		case sb.State == StatePaused && !sb.AutoResume:
			return nil, userErrorf(http.StatusBadGateway, "sandbox %q is paused and was not created with autoResume", id)
		case sb.State == StatePaused && sb.Transition == "":
			sb, err := e.Resume(ctx, AutoResumeTimeout)
			if err == nil || !isConflict(err) {
				return sb, err
			}
		case sb.Transition == opPausing:
			return nil, userErrorf(http.StatusBadGateway, "sandbox %q is being paused", id)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for sandbox %s to resume: %w", id, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
