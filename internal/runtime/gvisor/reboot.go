//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
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
	if err := r.raiseHostMemory(spec.ID, dir); err != nil {
		return err
	}
	r.log.Debug("sandbox booted again from its disk", "id", spec.ID, "took", time.Since(t0))
	return nil
}

// runDetached runs a runsc subcommand that starts a sandbox (run, restore)
// detached: own session (the sandbox must survive the daemon being
// killed), stdio on the agent log and /dev/null (files, not pipes: the
// sandbox and gofer inherit runsc's stdio, and a pipe would keep Wait, and
// the sandbox, hanging off this process). A failure carries the agent
// log's tail.
func (r *Runtime) runDetached(ctx context.Context, id, dir string, sub ...string) error {
	logf, err := os.OpenFile(AgentLogPath(dir), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening agent log: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return fmt.Errorf("opening %s: %w", os.DevNull, err)
	}
	defer devnull.Close()
	args := r.globalArgs()
	if r.debugDir != "" {
		args = append(args, "--debug", "--debug-log", filepath.Join(r.debugDir, id)+"/")
	}
	cmd := helperenv.Command(ctx, r.runsc, append(args, sub...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Run(); err != nil {
		if tail := runtime.LogTail(AgentLogPath(dir), 1024); tail != "" {
			err = fmt.Errorf("%w\nagent.log: %s", err, tail)
		}
		return fmt.Errorf("runsc %s %s: %w", sub[0], id, err)
	}
	return nil
}
