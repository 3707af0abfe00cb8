//go:build linux

package microvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/guest"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.Checkpointer = (*Runtime)(nil)

// stateFile is the VMM's saved device state in a checkpoint's image dir.
const stateFile = "vm.state"

// Checkpoint implements runtime.Checkpointer. Guest RAM already lives in
// the sandbox's memory file (a shared mapping), so saving is: stop the
// vCPUs, transfer only the device state (x-ignore-shared; tens of KB) to
// imageDir, quit. The overlay, memory file and VM record stay in dir.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir, imageDir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	rec, err := r.readRecord(id)
	if err != nil {
		return err
	}
	if !alive(rec) {
		return fmt.Errorf("microvm: sandbox %s is not running", id)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("creating checkpoint dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	err = r.save(ctx, dir, filepath.Join(imageDir, stateFile))
	// Whatever happened, the VMM must be gone: a failed checkpoint stops
	// the sandbox (as with gVisor).
	if !waitExit(rec, 10*time.Second) {
		_ = syscall.Kill(rec.PID, syscall.SIGKILL)
		waitExit(rec, 10*time.Second)
	}
	r.stopVolumes(id)
	_ = removeCgroups(id)
	if rerr := os.Remove(r.recordPath(id)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	if err != nil {
		return fmt.Errorf("checkpointing sandbox %s: %w", id, err)
	}
	return nil
}

func (r *Runtime) save(ctx context.Context, dir, statePath string) error {
	q, err := dialQMP(ctx, filepath.Join(dir, qmpSocket))
	if err != nil {
		return err
	}
	defer q.close()
	if err := q.ignoreShared(); err != nil {
		return err
	}
	if _, err := q.cmd("stop", nil); err != nil {
		return err
	}
	f, err := os.OpenFile(statePath, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating state file: %w", err)
	}
	defer f.Close()
	if _, err := q.cmd("getfd", map[string]any{"fdname": "state"}, int(f.Fd())); err != nil {
		return err
	}
	if _, err := q.cmd("migrate", map[string]any{"uri": "fd:state"}); err != nil {
		return err
	}
	if err := q.waitMigration(ctx); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing state file: %w", err)
	}
	_, err = q.cmd("quit", nil)
	return err
}

// waitExit waits up to d for rec's process to be gone.
func waitExit(rec record, d time.Duration) bool {
	for deadline := time.Now().Add(d); alive(rec); {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// Restore implements runtime.Checkpointer: it starts the same machine
// waiting for a saved state, loads the device state from imageDir (guest
// RAM maps the memory file again) and continues the vCPUs.
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, imageDir string) (err error) {
	if err := runtime.CheckID(ErrInvalidSpec, spec.ID); err != nil {
		return err
	}
	dir := filepath.Clean(spec.Dir)
	vr, err := r.stoppedVM(spec.ID, dir)
	if err != nil {
		return err
	}
	state, err := os.Open(filepath.Join(imageDir, stateFile))
	if err != nil {
		return fmt.Errorf("opening saved state: %w", err)
	}
	defer state.Close()
	if err := refreshVolumes(&vr, spec.Mounts); err != nil {
		return err
	}
	if err := r.handBackAddress(ctx, spec.NetNSPath); err != nil {
		return err
	}
	if err := r.serveVolumes(spec.ID, dir, vr); err != nil {
		return err
	}
	if vr.Pending != nil {
		if err := r.prepareReaddress(ctx, spec.NetNSPath, vr.Pending); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd, err := r.launch(spec.ID, dir, spec.NetNSPath, vr, true)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			r.stopVolumes(spec.ID)
			_ = cmd.Process.Kill()
			_ = os.Remove(r.recordPath(spec.ID))
			err = fmt.Errorf("restoring sandbox %s: %w", spec.ID, err)
		}
	}()
	q, err := dialQMP(ctx, filepath.Join(dir, qmpSocket))
	if err != nil {
		return err
	}
	defer q.close()
	if err := q.ignoreShared(); err != nil {
		return err
	}
	if _, err := q.cmd("getfd", map[string]any{"fdname": "state"}, int(state.Fd())); err != nil {
		return err
	}
	if _, err := q.cmd("migrate-incoming", map[string]any{"uri": "fd:state"}); err != nil {
		return err
	}
	if err := q.waitMigration(ctx); err != nil {
		return err
	}
	if _, err := q.cmd("cont", nil); err != nil {
		return err
	}
	if vr.Pending != nil {
		return r.readdress(ctx, dir, spec.NetNSPath, vr)
	}
	return nil
}

// Signal implements runtime.Checkpointer. The daemon sends SIGUSR1 after a
// restore to make a gVisor agent listen again; a microVM's agent never
// stops listening (its /freeze is a no-op: a VM snapshot keeps TCP state),
// but its clock stood still while the VM was saved, so SIGUSR1 sends the
// host's time to the agent's /freeze. Other signals cannot be delivered
// into the guest.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	if sig != syscall.SIGUSR1 {
		return fmt.Errorf("microvm: cannot send %v into the guest of %s", sig, id)
	}
	rec, err := r.readRecord(id)
	if err != nil {
		return err
	}
	var vr vmRecord
	if b, err := os.ReadFile(filepath.Join(rec.Dir, vmFile)); err != nil || json.Unmarshal(b, &vr) != nil || vr.GuestIP == "" {
		return fmt.Errorf("microvm: no guest address recorded for %s", id)
	}
	if err := syncGuestClock(ctx, vr.GuestIP); err != nil {
		var refused *guest.RefusedError
		if errors.As(err, &refused) {
			// The agent could not set the clock or reseed its kernel's
			// RNG: the VM would share its randomness with every VM
			// restored from the same state.
			return fmt.Errorf("microvm: preparing the restored guest of %s: %w", id, err)
		}
		r.log.Warn("setting the guest clock after a restore", "id", id, "err", err)
	}
	return nil
}

// syncGuestClock sends the host's time to the agent at ip (it retries
// while the restored guest's network comes back).
func syncGuestClock(ctx context.Context, ip string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return postClock(ctx, &guest.Client{}, ip)
}

// postClock sends the host's time to the agent at host until it answers
// 204 or ctx ends; the last error is a *guest.RefusedError when the agent
// answered otherwise.
func postClock(ctx context.Context, c *guest.Client, host string) error {
	for {
		err := c.SetClock(ctx, host)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
