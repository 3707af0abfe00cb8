package microvm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// stopWait bounds how long WaitStopped waits for the VMM to exit after
// SIGKILL; the teardown retries after it.
const stopWait = 10 * time.Second

// Stop implements runtime.Stopper: it SIGKILLs the VMM and returns once the
// signal is sent. The guest runs only inside QEMU's vCPU threads, so with
// SIGKILL pending on QEMU no guest instruction and no device emulation
// runs again, and QEMU does not fork. WaitStopped waits for its exit (in
// the background teardown); Destroy later removes the TAP, cgroups, dir
// and record.
func (r *Runtime) Stop(_ context.Context, id, _ string) error {
	rec, ok, err := r.stopRecord(id)
	if !ok {
		return err
	}
	return killVMM(rec)
}

// stopRecord reads the record of sandbox id for Stop and WaitStopped; ok is
// false when there is nothing to stop (no record) or on error.
func (r *Runtime) stopRecord(id string) (rec record, ok bool, err error) {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return record{}, false, err
	}
	rec, err = r.readRecord(id)
	if errors.Is(err, runtime.ErrNotFound) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, err
	}
	return rec, true, nil
}

// killVMM SIGKILLs rec's VMM if it is still the process rec started: the
// pid is pinned with a pidfd before its start time is compared, so a pid
// that was reused meanwhile is never signalled.
func killVMM(rec record) error {
	fd, err := unix.PidfdOpen(rec.PID, 0)
	if err != nil {
		return nil // gone
	}
	defer unix.Close(fd)
	if !alive(rec) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("microvm: SIGKILL of VMM %d: %w", rec.PID, err)
	}
	return nil
}

// WaitStopped implements runtime.Stopper: it SIGKILLs the VMM if it still
// runs (a daemon killed before its Stop) and waits for it to exit, or
// returns an error after stopWait (the teardown retries).
func (r *Runtime) WaitStopped(ctx context.Context, id, _ string) error {
	rec, ok, err := r.stopRecord(id)
	if !ok {
		return err
	}
	if err := killVMM(rec); err != nil {
		return err
	}
	for deadline := time.Now().Add(stopWait); alive(rec); {
		if time.Now().After(deadline) {
			return fmt.Errorf("microvm: VMM %d of %s did not exit %v after SIGKILL", rec.PID, id, stopWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for sandbox %s to stop: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
