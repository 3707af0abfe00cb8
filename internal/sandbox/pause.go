package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/network"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Lifecycle values of store.Sandbox.OnTimeout.
const (
	OnTimeoutKill  = "kill"
	OnTimeoutPause = "pause"
)

// Operations in progress (entry.op).
const (
	opPausing  = "pausing"
	opResuming = "resuming"
)

func onTimeout(autoPause bool) string {
	if autoPause {
		return OnTimeoutPause
	}
	return OnTimeoutKill
}

// extra is the JSON kept in store.Sandbox.Extra.
type extra struct {
	AutoResume bool `json:"autoResume,omitempty"`
	// Egress policy (netpolicy.go), re-applied after a daemon restart.
	AllowOut []string `json:"allowOut,omitempty"`
	DenyOut  []string `json:"denyOut,omitempty"`
	// BaseTemplate is the template under a sandbox created from a named
	// snapshot (TemplateID is then the snapshot's id).
	BaseTemplate string `json:"baseTemplate,omitempty"`
	// Agent is the host path of the agent binary the sandbox runs
	// (agentbin: one immutable path per build). Its restores must map the
	// same binary; "" in records from before it was kept (the current one).
	Agent string `json:"agent,omitempty"`
	// DiskOnly: paused without memory (pausedisk.go); PauseDiskOnly: the
	// timeout pause keeps only the disk (E2B's keepMemory: false).
	DiskOnly      bool `json:"diskOnly,omitempty"`
	PauseDiskOnly bool `json:"pauseDiskOnly,omitempty"`
}

func encodeExtra(x extra) string {
	if !x.AutoResume && len(x.AllowOut) == 0 && len(x.DenyOut) == 0 && x.BaseTemplate == "" && x.Agent == "" && !x.DiskOnly && !x.PauseDiskOnly {
		return ""
	}
	b, _ := json.Marshal(x)
	return string(b)
}

func decodeExtra(s string) extra {
	var x extra
	if s != "" {
		_ = json.Unmarshal([]byte(s), &x)
	}
	return x
}

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

// Pause checkpoints a running sandbox: its memory and processes are saved
// to <dir>/checkpoint, its writable layer (disk.img) and network namespace are
// kept, and it stops using CPU and memory. 409 when already paused or busy,
// 404 unknown, 501 when the runtime cannot checkpoint.
func (m *Manager) Pause(ctx context.Context, id string) error { return m.pauseOp(ctx, id, false) }

// PauseFilesystem pauses a running sandbox keeping only its disk
// (pausedisk.go). 409 when already paused or busy, 404 unknown, 501 when
// the runtime cannot.
func (m *Manager) PauseFilesystem(ctx context.Context, id string) error {
	return m.pauseOp(ctx, id, true)
}

func (m *Manager) pauseOp(ctx context.Context, id string, diskOnly bool) error {
	e, err := m.beginOp(ctx, id, opPausing, false)
	if err != nil {
		return err
	}
	defer m.endOp(e)
	return m.pauseKind(ctx, id, e, diskOnly)
}

// pauseKind pauses an entry already marked busy, with its memory or (diskOnly)
// without, or answers 501 when the runtime cannot.
func (m *Manager) pauseKind(ctx context.Context, id string, e *entry, diskOnly bool) error {
	if diskOnly {
		rb, err := m.rebooter()
		if err != nil {
			return err
		}
		return m.pauseDisk(ctx, rb, id, e)
	}
	cp, err := m.checkpointer()
	if err != nil {
		return err
	}
	return m.pause(ctx, cp, id, e)
}

// pause does the work of Pause for an entry already marked busy.
func (m *Manager) pause(ctx context.Context, cp runtime.Checkpointer, id string, e *entry) error {
	if err := m.checkPauseSpace(ctx, id); err != nil {
		return err // nothing done: the sandbox keeps running
	}
	start := time.Now()
	m.mu.Lock()
	if e.timer != nil {
		e.timer.Stop()
	}
	e.gen++ // a timer that already fired is ignored
	ip := e.guestIP
	m.mu.Unlock()

	st, step, err := m.checkpointLive(ctx, cp, id, e, ip, "a checkpoint")
	if err != nil {
		switch step {
		case checkpointFreeze: // the sandbox keeps running
			m.rearm(id, e)
		case checkpointStop:
			return hostDiskFull(fmt.Errorf("pausing sandbox %s (the sandbox was stopped): %w", id, err),
				fmt.Sprintf("pausing sandbox %s failed and the sandbox was stopped", id))
		}
		return err
	}
	m.mu.Lock()
	e.rec.State = StatePaused
	rec := e.rec
	m.mu.Unlock()
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return fmt.Errorf("saving paused state: %w", err)
	}
	m.log.Info("sandbox paused", "sandbox", id, "freeze", st.freeze, "elapsed", time.Since(start), "aborted_conns", st.aborted)
	return nil
}

// pauseOnTimeout pauses a sandbox whose lifecycle says "pause" when its
// timeout fires; if that fails the sandbox is removed.
func (m *Manager) pauseOnTimeout(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+opWait)
	defer cancel()
	e, err := m.beginOp(ctx, id, opPausing, false)
	if err != nil {
		m.log.Info("timeout pause skipped", "sandbox", id, "reason", err)
		return
	}
	defer m.endOp(e)
	m.mu.Lock()
	diskOnly := decodeExtra(e.rec.Extra).PauseDiskOnly
	m.mu.Unlock()
	m.log.Info("sandbox timed out; pausing", "sandbox", id, "keep_memory", !diskOnly)
	err = m.pauseKind(ctx, id, e, diskOnly)
	if err == nil {
		return
	}
	m.log.Error("pausing timed-out sandbox; killing it", "sandbox", id, "err", err)
	m.mu.Lock()
	owned := m.sandboxes[id] == e
	if owned {
		delete(m.sandboxes, id)
		if e.timer != nil {
			e.timer.Stop()
		}
	}
	m.mu.Unlock()
	if owned {
		if err := m.release(ctx, id, e.rec.Slot, m.sandboxDir(id)); err != nil {
			m.log.Error("killing sandbox after a failed timeout pause", "sandbox", id, "err", err)
		}
	}
}

// Resume restores a paused sandbox from its checkpoint and makes it expire
// timeout from now. 409 when it is running, 404 unknown.
func (m *Manager) Resume(ctx context.Context, id string, timeout time.Duration) (*Sandbox, error) {
	if err := m.checkTimeout(timeout); err != nil {
		return nil, err
	}
	e, err := m.beginOp(ctx, id, opResuming, true)
	if err != nil {
		return nil, err
	}
	defer m.endOp(e)
	m.mu.Lock()
	diskOnly := e.diskOnly()
	m.mu.Unlock()
	if diskOnly {
		return m.resumeDisk(ctx, id, e, timeout)
	}
	cp, err := m.checkpointer()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	m.mu.Lock()
	ip := e.guestIP
	m.mu.Unlock()
	restored, err := m.restoreInPlace(ctx, cp, id, e, ip)
	if err != nil {
		// Left paused: the image is still there and Restore deletes the
		// half-started container before trying again.
		return nil, err
	}
	if err := os.RemoveAll(m.imageDir(id)); err != nil {
		m.log.Warn("removing checkpoint after resume", "sandbox", id, "err", err)
	}
	m.mu.Lock()
	e.rec.State = StateRunning
	if timeout > 0 {
		e.rec.EndAt = time.Now().UTC().Add(timeout)
	}
	m.armLocked(id, e)
	rec := e.rec
	sb := snapshot(e)
	m.mu.Unlock()
	sb.Transition = ""
	if err := m.cfg.Store.PutSandbox(ctx, &rec); err != nil {
		return nil, fmt.Errorf("saving resumed state: %w", err)
	}
	m.log.Info("sandbox resumed", "sandbox", id, "restore", restored, "elapsed", time.Since(start))
	return sb, nil
}

// netNSPath is the sandbox's network namespace path. m.mu must be held.
func (e *entry) netNSPath(m *Manager) string {
	return filepath.Join(network.NetNSDir, m.cfg.NetNSPrefix+e.rec.ID)
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
	m.sandboxes[row.ID] = &entry{rec: *row, guestIP: ip}
	return true
}

// AutoResumeTimeout is the timeout given to a sandbox resumed by traffic.
const AutoResumeTimeout = 5 * time.Minute

// EnsureRunning is used by the proxy: it returns id when running; a paused
// sandbox created with autoResume is resumed (or, when a resume is already
// in progress, waited for). Otherwise it returns a user error.
func (m *Manager) EnsureRunning(ctx context.Context, id string) (*Sandbox, error) {
	for {
		sb, err := m.Get(id)
		if err != nil {
			return nil, err
		}
		switch {
		case sb.State == StateRunning && sb.Transition == "":
			return sb, nil
		case sb.State == StatePaused && !sb.AutoResume:
			return nil, userErrorf(http.StatusBadGateway, "sandbox %q is paused and was not created with autoResume", id)
		case sb.State == StatePaused && sb.Transition == "":
			sb, err := m.Resume(ctx, id, AutoResumeTimeout)
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

func isConflict(err error) bool {
	ue, ok := AsUserError(err)
	return ok && ue.Code == http.StatusConflict
}

// rearm restarts the timer of a sandbox whose pause was refused.
func (m *Manager) rearm(id string, e *entry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sandboxes[id] == e {
		m.armLocked(id, e)
	}
}

// Readdresser is implemented by networks that must put the guest address
// back into a namespace before a restore (network.Manager.Readdress).
type Readdresser interface {
	Readdress(ctx context.Context, id string, slot int) error
}

func (m *Manager) readdress(ctx context.Context, id string, slot int) error {
	if r, ok := m.cfg.Network.(Readdresser); ok {
		if err := r.Readdress(ctx, id, slot); err != nil {
			return fmt.Errorf("restoring the guest address of %s: %w", id, err)
		}
	}
	return nil
}
