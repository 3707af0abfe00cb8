//go:build linux

package gvisor

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

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
	args = append(args, r.traceArgs(sub[0])...)
	command := func(group *os.File) *exec.Cmd {
		cmd := helperenv.Command(ctx, r.runsc, append(args, sub...)...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if group != nil { // the kill group (killgroup_linux.go)
			cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(group.Fd())
		}
		return cmd
	}
	cmd := command(nil)
	if group := r.openKillGroup(id); group != nil {
		cmd = command(group)
		err := cmd.Start()
		group.Close()
		r.startedInKillGroup(id, err == nil)
		if err != nil {
			r.log.Warn("starting runsc in the sandbox's kill group failed; starting it without", "id", id, "err", err)
			cmd = command(nil)
		}
	}
	err = nil
	if cmd.Process == nil {
		err = cmd.Start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		if tail := runtime.LogTail(AgentLogPath(dir), 1024); tail != "" {
			err = fmt.Errorf("%w\nagent.log: %s", err, tail)
		}
		return fmt.Errorf("runsc %s %s: %w", sub[0], id, err)
	}
	return nil
}
