package sandbox

import (
	"context"
	"net/netip"
	"os"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// resumeInterrupted handles, at startup, a sandbox stored as running that the
// runtime no longer runs but that has a checkpoint image next to it: the
// daemon died while pausing or forking it (the stored state changes to paused
// only after a complete checkpoint, and a fork parent is restored by the
// daemon after its children). The surviving `runsc checkpoint` finished the
// image, so the sandbox is resumed from it with the time it had left; nothing
// is lost. When the image does not restore (cut short, or no time left) it
// returns false and Restore removes the sandbox as usual (reported gone).
func (m *Manager) resumeInterrupted(ctx context.Context, row *store.Sandbox, ip netip.Addr) bool {
	left := time.Until(row.EndAt)
	if left < time.Second {
		return false
	}
	if _, err := m.checkpointer(); err != nil {
		return false
	}
	rec := *row
	rec.State = StatePaused
	if !m.reattachPaused(&rec, ip) {
		return false
	}
	log := m.log.With("sandbox", row.ID)
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	e, err := m.Lookup(row.ID)
	if err == nil {
		_, err = e.Resume(rctx, left.Truncate(time.Second))
	}
	if err != nil {
		log.Warn("sandbox interrupted mid-checkpoint does not resume; removing it", "err", err)
		if e != nil {
			m.unindex(e)
		}
		return false
	}
	log.Info("sandbox interrupted mid-checkpoint resumed from its image", "left", left.Round(time.Second))
	return true
}

// maxCheckpointWait bounds the wait for a checkpoint left running by a
// killed daemon.
const maxCheckpointWait = 5 * time.Minute

// waitCheckpoint waits, at startup, until no checkpoint of id is being
// written and no restore of it runs any more, so that Restore judges the
// sandbox by its final state (a checkpoint in progress still reads "running"
// and stops the sandbox when it ends). It does nothing when id has no
// checkpoint directory.
func (m *Manager) waitCheckpoint(ctx context.Context, id string) {
	cw := m.caps.CheckpointWatcher
	if cw == nil {
		return
	}
	if _, err := os.Stat(m.imageDir(id)); err != nil {
		return
	}
	deadline := time.Now().Add(maxCheckpointWait)
	for cw.CheckpointInProgress(id) {
		if time.Now().After(deadline) {
			m.log.Warn("checkpoint left by the previous daemon still running; judging the sandbox anyway", "sandbox", id)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// thawInterrupted handles, at startup, a sandbox the runtime runs while a
// checkpoint directory is still next to it: the daemon died after restoring
// it (a fork parent, a resume) but before waking its agent, or after a
// checkpoint that was refused. It wakes the agent (SIGUSR1; a no-op when the
// agent is not frozen), waits for it and removes the image. False when the
// agent does not answer: Restore then removes the sandbox.
func (m *Manager) thawInterrupted(ctx context.Context, row *store.Sandbox, ip netip.Addr) bool {
	if _, err := os.Stat(m.imageDir(row.ID)); err != nil {
		return true
	}
	cp, err := m.checkpointer()
	if err != nil {
		return true
	}
	log := m.log.With("sandbox", row.ID)
	hctx, cancel := context.WithTimeout(ctx, m.cfg.AgentReadyTimeout)
	defer cancel()
	if err := cp.Signal(hctx, row.ID, syscall.SIGUSR1); err != nil {
		log.Warn("waking the agent of a sandbox restored by the previous daemon", "err", err)
		return false
	}
	if err := m.agent.WaitHealthy(hctx, ip.String()); err != nil {
		log.Warn("agent of a sandbox restored by the previous daemon does not answer", "err", err)
		return false
	}
	if err := os.RemoveAll(m.imageDir(row.ID)); err != nil {
		log.Warn("removing the checkpoint of a restored sandbox", "err", err)
	}
	log.Info("sandbox restored by the previous daemon woken up")
	return true
}
