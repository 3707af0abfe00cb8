//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.Rebooter = (*Runtime)(nil)

// Shutdown implements runtime.Rebooter: the container is killed and
// deleted from runsc's state (its memory is gone), while the writable
// layer, the overlay root filesystem and the bundle stay mounted in dir for
// Boot. The layer lives on the host (--overlay2=none), so nothing the guest
// wrote is lost with the sentry.
func (r *Runtime) Shutdown(ctx context.Context, id, dir string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	if err := r.waitDeleted(ctx, id); err != nil {
		return err
	}
	if _, err := r.exec(ctx, "kill", id, "KILL"); err != nil && !notFound(err) {
		r.log.Debug("runsc kill before a shutdown", "id", id, "err", err)
	}
	if _, err := r.exec(ctx, "delete", "--force", id); err != nil && !notFound(err) {
		return fmt.Errorf("runsc delete %s: %w", id, err)
	}
	r.removeCgroups(id)
	return nil
}

// Boot implements runtime.Rebooter: `runsc run` of the kept bundle, a fresh
// sandbox kernel on the kept disk.
func (r *Runtime) Boot(ctx context.Context, spec runtime.Spec) error {
	dir, err := r.restart(ctx, spec, "boot")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := r.runDetached(ctx, spec.ID, dir, "run", "--detach", "--bundle", dir, spec.ID); err != nil {
		return err
	}
	r.addrs.set(spec.ID, spec.GuestAddr)
	if err := r.raiseHostMemory(spec.ID, dir); err != nil {
		return err
	}
	r.log.Debug("sandbox booted again from its disk", "id", spec.ID, "took", time.Since(t0))
	return nil
}
