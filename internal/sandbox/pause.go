package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

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
	return e.pauseKind(ctx, diskOnly, pauseMode{mustExport: true})
}

// pauseKind pauses e, already marked busy, with its memory or (diskOnly)
// without, or answers 501 when the runtime cannot.
func (e *Live) pauseKind(ctx context.Context, diskOnly bool, mode pauseMode) error {
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
	return e.pause(ctx, cp, mode)
}

// pauseMode says what a pause does on a cluster node (move.go).
type pauseMode struct {
	// mustExport: a pause whose image cannot be uploaded brings the
	// sandbox back and fails (a user's pause, an evacuation); otherwise
	// (a timeout's pause) it stays paused on this node only.
	mustExport bool
	// evacuate marks the sandbox evacuated: its next request resumes it.
	evacuate bool
}

// pause does the work of Pause for e, already marked busy.
func (e *Live) pause(ctx context.Context, cp runtime.Checkpointer, mode pauseMode) error {
	m, id := e.m, e.rec.ID
	r := m.newSteps(opPause, kindMemory, id)
	if err := r.run(ctx, nil, stepOf(stepSpace, e.checkPauseSpace)); err != nil {
		return err // nothing done: the sandbox keeps running
	}
	background := m.cfg.Node != nil && !mode.evacuate
	if background && mode.mustExport {
		// The upload follows the answer (NodeHooks.Paused): a store that cannot be
		// reached now refuses the pause before anything is done, as a pause
		// that uploaded before it answered did.
		if err := reachable(ctx, m.cfg.Node); err != nil {
			return m.storeError(fmt.Sprintf("pausing sandbox %s", id), fmt.Errorf("%w; the sandbox keeps running", err))
		}
	}
	start := time.Now()
	e.mu.Lock()
	e.stopTimer()
	e.gen++ // a timer that already fired is ignored
	e.mu.Unlock()

	st, step, err := e.checkpointLive(ctx, cp, "a checkpoint", r)
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
	if background {
		err := m.syncPaused(id)
		if err == nil {
			return e.commitPausedUploading(ctx, start, st)
		}
		m.log.Warn("the checkpoint could not be made durable here; uploading it before the pause answers", "sandbox", id, "err", err)
	}
	var ex PausedImage
	if m.cfg.Node != nil {
		var err error
		if ex, err = e.exportPaused(ctx); err != nil {
			if mode.mustExport {
				return e.unpause(ctx, cp, err)
			}
			ex = PausedImage{}
			m.log.Warn("the paused sandbox's image could not be uploaded; it stays paused on this node only", "sandbox", id, "err", err)
		}
	}
	image := ex.Key
	left := time.Until(e.View().EndAt)
	// Committed even when ctx ended meanwhile (a timeout's pause whose upload
	// used its time): the sandbox is checkpointed, its row must say so.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := r.run(cctx, nil, stepOf(stepCommit, func(cctx context.Context) error {
		return e.commit(cctx, "paused state", func() {
			e.rec.State = StatePaused
			x := decodeExtra(e.rec.Extra)
			x = withImage(x, ex)
			if mode.evacuate {
				x.Evacuated, x.LeftMs = true, max(left.Milliseconds(), 1)
			}
			e.rec.Extra = encodeExtra(x)
		})
	})); err != nil {
		if image != "" {
			m.dropImage(image)
		}
		return err
	}
	m.log.Info("sandbox paused", "sandbox", id, "freeze", st.freeze, "elapsed", time.Since(start), "aborted_conns", st.aborted,
		"uploaded", image != "", "evacuated", mode.evacuate)
	return nil
}

// commitPausedUploading records e (checkpointed, durable here) as paused
// with its upload pending, and has the node start the upload
// (NodeHooks.Paused).
func (e *Live) commitPausedUploading(ctx context.Context, start time.Time, st checkpointStats) error {
	m, id := e.m, e.rec.ID
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.commit(cctx, "paused state", func() {
		e.rec.State = StatePaused
		x := withImage(decodeExtra(e.rec.Extra), PausedImage{})
		x.Uploading = true
		e.rec.Extra = encodeExtra(x)
	}); err != nil {
		return err
	}
	m.cfg.Node.Paused(e)
	m.log.Info("sandbox paused", "sandbox", id, "freeze", st.freeze, "elapsed", time.Since(start), "aborted_conns", st.aborted,
		"uploading", true)
	return nil
}

// unpause brings back a sandbox whose pause could not upload its image
// (cause) and returns the pause's error: the sandbox keeps running. When it
// cannot be restored it stays paused on this node only, and the error
// says so.
func (e *Live) unpause(ctx context.Context, cp runtime.Checkpointer, cause error) error {
	m, id := e.m, e.rec.ID
	what := fmt.Sprintf("pausing sandbox %s: uploading its image failed", id)
	if unavailable(m.cfg.Node, cause) {
		what = fmt.Sprintf("pausing sandbox %s: the artifact store is unreachable (%v)", id, cause)
	} else {
		what = fmt.Sprintf("%s (%v)", what, cause)
	}
	if _, err := e.restoreInPlace(context.WithoutCancel(ctx), cp, nil); err != nil {
		m.log.Error("bringing back a sandbox whose pause could not upload", "sandbox", id, "err", err)
		if cerr := e.commit(ctx, "paused state", func() { e.rec.State = StatePaused }); cerr != nil {
			m.log.Error("saving the paused state", "sandbox", id, "err", cerr)
		}
		return userErrorf(http.StatusInternalServerError, "%s, and resuming it failed (%v): it stays paused on node %s only", what, err, m.cfg.NodeID)
	}
	if err := os.RemoveAll(m.imageDir(id)); err != nil {
		m.log.Warn("removing checkpoint after a failed pause", "sandbox", id, "err", err)
	}
	e.rearm()
	m.log.Warn("pause failed: the image could not be uploaded; the sandbox keeps running", "sandbox", id, "err", cause)
	code := http.StatusInternalServerError
	if unavailable(m.cfg.Node, cause) {
		code = http.StatusServiceUnavailable
	}
	return userErrorf(code, "%s; the sandbox keeps running", what)
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
	err := e.pauseKind(ctx, diskOnly, pauseMode{})
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
	// Its rules need this node's egress proxy: refused (503) before
	// anything changes when the proxy is down, as a create is.
	e.mu.Lock()
	rules := decodeExtra(e.rec.Extra).NetworkRules
	e.mu.Unlock()
	if err := m.checkRulesRuntime(rules); err != nil { // cabundle.go
		return nil, err
	}
	// Resumed here, its image is not needed: an upload in progress stops
	// (and one that already committed is handled below like any image).
	if m.cfg.Node != nil {
		m.cfg.Node.Resuming(e)
	}
	e.mu.Lock()
	diskOnly := e.diskOnly()
	x := decodeExtra(e.rec.Extra)
	e.mu.Unlock()
	if x.Evacuated && x.LeftMs > 0 {
		// Paused by a drain or a stop, not by its user: it keeps what was
		// left of its timeout (at least a minute).
		timeout = max(timeout, time.Duration(x.LeftMs)*time.Millisecond, time.Minute)
	}
	if diskOnly {
		return e.resumeDisk(ctx, timeout)
	}
	if x.Image != "" && m.cfg.Node != nil {
		if e.imported() {
			return e.resumeImported(ctx, timeout)
		}
		// Its image is in the store: claim the row, so that no other node
		// adopts it while it resumes here.
		if err := e.claimHere(ctx); err != nil {
			return nil, err
		}
	}
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r := m.newSteps(opResume, kindMemory, id)
	restored, err := e.restoreInPlace(ctx, cp, r)
	if err != nil {
		// Left paused: the image is still there and Restore deletes the
		// half-started container before trying again.
		if x.Image != "" && m.cfg.Node != nil {
			e.unclaim(ctx)
		}
		return nil, err
	}
	e.reinstallCA(ctx, x) // cabundle.go
	var sb *Sandbox
	if err := r.run(ctx, nil, step{stepCommit, func(ctx context.Context) error {
		if err := os.RemoveAll(m.imageDir(id)); err != nil {
			m.log.Warn("removing checkpoint after resume", "sandbox", id, "err", err)
		}
		var err error
		sb, err = e.commitRunning(ctx, timeout, func() {
			e.rec.Extra = encodeExtra(resumedExtra(decodeExtra(e.rec.Extra)))
		})
		return err
	}}); err != nil {
		return nil, err
	}
	if x.Image != "" {
		m.dropImage(x.Image)
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
		case sb.State == StatePaused && !sb.AutoResume && !sb.Evacuated:
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

// syncPaused makes the checkpoint of sandbox id durable on this node: the
// files of its memory image and their directory are fsync'd, and so is its
// writable layer (the file system mounted on <dir>/layer, then disk.img
// under it). The node's background upload, or a restart's, reads them.
func (m *Manager) syncPaused(id string) error {
	img := m.imageDir(id)
	ents, err := os.ReadDir(img)
	if err != nil {
		return err
	}
	var errs []error
	for _, ent := range ents {
		if ent.Type().IsRegular() {
			errs = append(errs, fsyncPath(filepath.Join(img, ent.Name())))
		}
	}
	errs = append(errs, fsyncPath(img))
	dir := m.sandboxDir(id)
	if f, err := os.Open(filepath.Join(dir, "layer")); err == nil {
		errs = append(errs, unix.Syncfs(int(f.Fd())))
		f.Close()
	}
	for _, name := range []string{"disk.img", "."} {
		if err := fsyncPath(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("syncing the checkpoint of %s: %w", id, err)
	}
	return nil
}

func fsyncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
