package microvm

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// stopWait bounds how long Stop waits for the VMM to exit after SIGKILL.
const stopWait = 10 * time.Second

// Stop implements runtime.Stopper: it SIGKILLs the VMM (the guest and
// everything in it stop with it) and waits for it to exit. Destroy later
// removes the TAP, cgroups, dir and record.
func (r *Runtime) Stop(ctx context.Context, id, _ string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	rec, err := r.readRecord(id)
	if errors.Is(err, runtime.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if !alive(rec) {
		return nil
	}
	_ = syscall.Kill(rec.PID, syscall.SIGKILL)
	for deadline := time.Now().Add(stopWait); alive(rec); {
		if time.Now().After(deadline) {
			return fmt.Errorf("microvm: VMM %d of %s did not exit %v after SIGKILL", rec.PID, id, stopWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopping sandbox %s: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
