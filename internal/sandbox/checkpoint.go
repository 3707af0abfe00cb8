package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Checkpointing a live sandbox: the one routine pause, fork and snapshot
// share (clear the old image → freeze the guest → checkpoint → drop the
// sandbox when the runtime refused and stopped it), and the way a
// checkpointed sandbox comes back under its own id (a resume, a fork parent,
// a snapshot's source).

// checkpointDir is where a paused sandbox's memory image lives, inside its
// runtime directory (next to disk.img, the writable layer).
const checkpointDir = "checkpoint"

// checkpointer returns the runtime's checkpoint capability or a 501 user
// error naming the runtime.
func (m *Manager) checkpointer() (runtime.Checkpointer, error) {
	cp := m.caps.Checkpointer
	if cp == nil {
		return nil, userErrorf(http.StatusNotImplemented,
			"the %q runtime cannot pause, resume or fork sandboxes (no checkpoint/restore)", m.cfg.Runtime.Name())
	}
	return cp, nil
}

func (m *Manager) imageDir(id string) string {
	return filepath.Join(m.sandboxDir(id), checkpointDir)
}

// hasCheckpoint reports whether id's checkpoint image exists.
func (m *Manager) hasCheckpoint(id string) bool {
	_, err := os.Stat(filepath.Join(m.imageDir(id), "checkpoint.img"))
	return err == nil
}

// checkpointStep is where checkpointLive stopped.
type checkpointStep int

const (
	checkpointDone   checkpointStep = iota
	checkpointClear                 // the old image could not be removed; nothing done
	checkpointFreeze                // the guest refused the freeze; it keeps running
	checkpointStop                  // the runtime refused: the sandbox was stopped and dropped
)

// checkpointStats is what checkpointLive measured.
type checkpointStats struct {
	aborted int           // connections the freeze cut
	freeze  time.Duration // until the guest was frozen
}

// checkpointLive checkpoints the running sandbox e (marked busy) into
// imageDir(id). purpose ("a checkpoint", "a fork", "a
// snapshot") names the operation in a refused freeze's error. It returns
// what it measured, and on failure the step that failed
// with its error: at checkpointStop the error is the runtime's, unwrapped,
// and the sandbox is gone (a refused checkpoint stops a gVisor sandbox, also
// when its image could not be written).
func (e *Live) checkpointLive(ctx context.Context, cp runtime.Checkpointer, purpose string, r *steps) (st checkpointStats, step checkpointStep, err error) {
	m, id := e.m, e.rec.ID
	start := time.Now()
	img := m.imageDir(id)
	err = r.run(ctx, nil,
		stepOf(stepClear, func(context.Context) error {
			if err := os.RemoveAll(img); err != nil {
				step = checkpointClear
				return fmt.Errorf("clearing old checkpoint: %w", err)
			}
			return nil
		}),
		stepOf(stepFreeze, func(ctx context.Context) error {
			var err error
			if st.aborted, err = e.freeze(ctx); err != nil {
				step = checkpointFreeze
				return fmt.Errorf("preparing sandbox %s for %s: %w", id, purpose, err)
			}
			st.freeze = time.Since(start)
			return nil
		}),
		stepOf(stepCheckpoint, func(ctx context.Context) error {
			if err := cp.Checkpoint(ctx, id, m.sandboxDir(id), img); err != nil {
				m.log.Error("checkpoint failed; removing sandbox", "sandbox", id, "purpose", purpose, "err", err)
				e.dropStopped(ctx)
				step = checkpointStop
				return err
			}
			return nil
		}),
	)
	return st, step, err
}

// dropStopped forgets and releases a sandbox that the runtime stopped (a
// refused checkpoint or shutdown) or that a capture used up.
func (e *Live) dropStopped(ctx context.Context) {
	m, id := e.m, e.rec.ID
	m.unindex(e)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.release(cctx); err != nil {
		m.log.Error("cleaning up a stopped sandbox", "sandbox", id, "err", err)
	}
}

// restoreInPlace restores the checkpointed sandbox e (marked busy) from
// imageDir(id) in its own directory and network
// namespace, lets its agent listen again and waits for its /health. It
// returns how long the runtime's restore took.
func (e *Live) restoreInPlace(ctx context.Context, cp runtime.Checkpointer, r *steps) (restored time.Duration, err error) {
	m, id := e.m, e.rec.ID
	start := time.Now()
	e.mu.Lock()
	ip := e.guestIP
	slot := e.rec.Slot
	e.mu.Unlock()
	spec := runtime.Spec{ID: id, Dir: m.sandboxDir(id), GuestAddr: ip}
	err = r.run(ctx, nil,
		step{stepReaddress, func(ctx context.Context) error {
			if err := e.readdress(ctx, slot); err != nil {
				return err
			}
			spec.NetNSPath = e.netNSPath()
			return nil
		}},
		step{stepRestore, func(ctx context.Context) error {
			if err := cp.Restore(ctx, spec, m.imageDir(id)); err != nil {
				return fmt.Errorf("resuming sandbox %s: %w", id, err)
			}
			restored = time.Since(start)
			return nil
		}},
		step{stepWake, func(ctx context.Context) error {
			if err := cp.Signal(ctx, id, syscall.SIGUSR1); err != nil { // the agent listens again
				return fmt.Errorf("waking the agent of %s: %w", id, err)
			}
			return nil
		}},
		step{stepWait, func(ctx context.Context) error {
			if err := m.waitAgent(ctx, id, spec.Dir, ip.String()); err != nil {
				return fmt.Errorf("resumed agent of %s is not healthy: %w", id, err)
			}
			return nil
		}},
	)
	return restored, err
}

// bringBack restores a sandbox checkpointed for a fork or a snapshot in the
// background (runsc needs ~1 s to delete the stopped sandbox before it can be
// restored under the same id), calls done with the restore's result and
// then ends the operation on e: done still holds it, so what it does with the
// image (remove it) cannot race a pause, fork or snapshot of e that starts
// once the operation ends and writes a new image to the same place. A sandbox
// that cannot be restored is left paused (its image is its checkpoint) so
// that a later resume can retry.
func (e *Live) bringBack(ctx context.Context, cp runtime.Checkpointer, done func(error)) {
	e.m.background(func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		err := e.restoreParent(rctx, cp)
		done(err)
		e.endOp()
	})
}

// restoreParent restarts a forked or snapshotted sandbox from its
// checkpoint. If that fails it is left paused.
func (e *Live) restoreParent(ctx context.Context, cp runtime.Checkpointer) error {
	m, id := e.m, e.rec.ID
	_, err := e.restoreInPlace(ctx, cp, nil)
	if err == nil {
		return nil
	}
	// Killed while it was being restored (Kill removes the entry and then
	// the runtime state under this restore): nothing to keep, and its store
	// row must not come back (commit leaves a sandbox that is gone alone).
	perr := e.commit(context.WithoutCancel(ctx), "paused state of a checkpointed sandbox", func() {
		e.rec.State = StatePaused
		e.stopTimer()
	})
	var gone *Error
	switch {
	case errors.As(perr, &gone):
		m.log.Info("sandbox killed while it was being restored from its fork or snapshot checkpoint", "sandbox", id, "restore_err", err)
	case perr != nil:
		m.log.Error("restoring a sandbox from its fork or snapshot checkpoint failed; leaving it paused", "sandbox", id, "err", err)
		m.log.Error("saving the paused state of a checkpointed sandbox", "sandbox", id, "err", perr)
	default:
		m.log.Error("restoring a sandbox from its fork or snapshot checkpoint failed; leaving it paused", "sandbox", id, "err", err)
	}
	return err
}

// Readdresser is implemented by networks that must put the guest address
// back into a namespace before a restore (network.Manager.Readdress).
type Readdresser interface {
	Readdress(ctx context.Context, id string, slot int) error
}

// readdress puts e's guest address back into its namespace before a
// restore or a boot from its disk (when the network needs it).
func (e *Live) readdress(ctx context.Context, slot int) error {
	id := e.rec.ID
	if r, ok := e.m.cfg.Network.(Readdresser); ok {
		if err := r.Readdress(ctx, id, slot); err != nil {
			return fmt.Errorf("restoring the guest address of %s: %w", id, err)
		}
	}
	return nil
}
