//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.Checkpointer = (*Runtime)(nil)

// Checkpoint implements runtime.Checkpointer with `runsc checkpoint`, then
// deletes the stopped container from runsc's state so that Restore can reuse
// the id. The overlay root filesystem and the writable layer stay mounted in
// dir.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir, imageDir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	if !filepath.IsAbs(imageDir) {
		return fmt.Errorf("%w: image dir %q must be an absolute path", ErrInvalidSpec, imageDir)
	}
	if err := os.MkdirAll(imageDir, 0o700); err != nil {
		return fmt.Errorf("creating checkpoint dir: %w", err)
	}
	t0 := time.Now()
	undo := r.addrs.saving(id) // no OOM guard wake-ups while it is saved (wake.go)
	if _, err := r.exec(ctx, "checkpoint", "--image-path", imageDir, id); err != nil {
		undo()
		if notFound(err) {
			return runtime.ErrNotFound
		}
		return fmt.Errorf("runsc checkpoint %s: %w", id, err)
	}
	r.log.Debug("sandbox checkpointed", "id", id, "save", time.Since(t0))
	// runsc delete of the stopped sandbox takes ~1 s (it polls for the
	// sandbox process to go away): do it in the background; Restore and
	// Destroy wait for it.
	r.deleteAsync(id)
	return nil
}

// deleteAsync removes the stopped container id from runsc's state in the
// background; waitDeleted waits for it.
func (r *Runtime) deleteAsync(id string) {
	done := make(chan struct{})
	r.mu.Lock()
	if r.deleting == nil {
		r.deleting = map[string]chan struct{}{}
	}
	r.deleting[id] = done
	r.mu.Unlock()
	go func() {
		defer func() {
			r.mu.Lock()
			if r.deleting[id] == done {
				delete(r.deleting, id)
			}
			r.mu.Unlock()
			close(done)
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		t0 := time.Now()
		if _, err := r.exec(ctx, "delete", "--force", id); err != nil && !notFound(err) {
			r.log.Warn("runsc delete after checkpoint", "id", id, "err", err)
		}
		r.removeCgroups(id)
		r.log.Debug("checkpointed container deleted", "id", id, "took", time.Since(t0))
	}()
}

// waitDeleted waits for a background delete of id, if any.
func (r *Runtime) waitDeleted(ctx context.Context, id string) error {
	r.mu.Lock()
	done := r.deleting[id]
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the checkpointed container %s to be deleted: %w", id, ctx.Err())
	}
}

// Restore implements runtime.Checkpointer with `runsc restore --detach`,
// started like `runsc run` (own session, stdio on files).
func (r *Runtime) Restore(ctx context.Context, spec runtime.Spec, imageDir string) error {
	if _, err := os.Stat(filepath.Join(imageDir, "checkpoint.img")); err != nil {
		return fmt.Errorf("%w: no checkpoint image in %s: %v", ErrInvalidSpec, imageDir, err)
	}
	dir, err := r.restart(ctx, spec, "restore")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.runDetached(ctx, spec.ID, dir, "restore", "--detach", "--image-path", imageDir, "--bundle", dir, spec.ID); err != nil {
		return err
	}
	r.addrs.set(spec.ID, spec.GuestAddr)
	if err := r.raiseHostMemory(spec.ID, dir); err != nil {
		return err
	}
	r.log.Debug("sandbox restored", "id", spec.ID, "took", time.Since(t0))
	return nil
}

// restart checks and prepares spec.Dir for starting a stopped sandbox of
// this runtime again (what: "restore" or "boot"): its root filesystem is
// still mounted, a layer left frozen by a killed daemon is thawed, and
// runsc's state of the stopped container is gone. It returns the clean dir.
func (r *Runtime) restart(ctx context.Context, spec runtime.Spec, what string) (string, error) {
	if err := runtime.CheckID(ErrInvalidSpec, spec.ID); err != nil {
		return "", err
	}
	dir := filepath.Clean(spec.Dir)
	if !filepath.IsAbs(dir) || dir == "/" {
		return "", fmt.Errorf("%w: Dir %q must be an absolute path", ErrInvalidSpec, spec.Dir)
	}
	if err := checkNetNS(spec.NetNSPath); err != nil {
		return "", err
	}
	if !isMountPoint(RootfsDir(dir)) {
		return "", fmt.Errorf("gvisor: the root filesystem of %s is not mounted (host rebooted?); cannot %s it", spec.ID, what)
	}
	if thawed, err := thawLayer(dir); err != nil {
		return "", err
	} else if thawed {
		r.log.Warn("the layer filesystem was left frozen (daemon killed during a layer copy); thawed", "id", spec.ID)
	}
	if err := r.waitDeleted(ctx, spec.ID); err != nil {
		return "", err
	}
	if r.known(spec.ID) {
		// A stopped leftover (e.g. a restore that failed half-way).
		if _, err := r.exec(ctx, "delete", "--force", spec.ID); err != nil && !notFound(err) {
			return "", fmt.Errorf("runsc delete before %s %s: %w", what, spec.ID, err)
		}
	}
	return dir, nil
}

// isMountPoint reports whether p is a mount point in this mount namespace.
func isMountPoint(p string) bool {
	mps, err := mountsUnder(p)
	if err != nil {
		return false
	}
	for _, mp := range mps {
		if mp == filepath.Clean(p) {
			return true
		}
	}
	return false
}

// Signal implements runtime.Checkpointer: SIGUSR1 and SIGUSR2 go to the
// agent's wake port as a datagram when the sandbox's address is known
// (wake.go), everything else, and the fallback, with `runsc kill`.
func (r *Runtime) Signal(ctx context.Context, id string, sig syscall.Signal) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	if handled, err := r.wake(ctx, id, sig); handled {
		return err
	}
	return r.kill(ctx, id, sig)
}
