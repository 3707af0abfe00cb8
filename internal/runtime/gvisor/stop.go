package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// stopWait bounds how long Stop waits for the sandbox's processes to exit
// after SIGKILL.
const stopWait = 10 * time.Second

// Stop implements runtime.Stopper: it SIGKILLs every process in the
// sandbox's cgroup (the Sentry, its systrap stubs and the gofer) and waits
// until none is left, without asking runsc (a runsc process costs more than
// the kill). Destroy later deletes the container, its cgroups and dir. A
// sandbox without a cgroup (not running, or cgroups off) is stopped with
// `runsc kill`.
func (r *Runtime) Stop(ctx context.Context, id, _ string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	r.unwatchMemory(id)
	procs := r.cgroupProcsFile(id)
	if procs == "" {
		if _, err := r.exec(ctx, "kill", id, "KILL"); err != nil && !notFound(err) {
			r.log.Debug("runsc kill", "id", id, "err", err)
		}
		return nil
	}
	deadline := time.Now().Add(stopWait)
	for {
		pids, err := readPIDs(procs)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // cgroup removed: nothing left in it
			}
			return fmt.Errorf("stopping sandbox %s: %w", id, err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			killInCgroup(pid, r.cgroupsPath(id))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("stopping sandbox %s: %d processes still in its cgroup %v after SIGKILL", id, len(pids), stopWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopping sandbox %s: %w", id, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// killInCgroup SIGKILLs pid if it is (still) in cgroup cg: the pid is
// pinned with a pidfd first, so a pid that exited meanwhile and was reused
// by an unrelated process (pid_max may be 32768) is never signalled.
func killInCgroup(pid int, cg string) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return // gone
	}
	defer unix.Close(fd)
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil || !inCgroup(string(data), cg) {
		return
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
}

// inCgroup reports whether a /proc/<pid>/cgroup listing puts the process
// in cg (under any hierarchy).
func inCgroup(listing, cg string) bool {
	for _, line := range strings.Split(listing, "\n") {
		// hierarchy-ID:controllers:path
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] == cg {
			return true
		}
	}
	return false
}

// cgroupProcsFile is the cgroup.procs of the sandbox's cgroup (the pids
// controller's under cgroup v1, the unified one under v2), or "" when there
// is none.
func (r *Runtime) cgroupProcsFile(id string) string {
	cg := r.cgroupsPath(id)
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup/pids", cg, "cgroup.procs"),
		filepath.Join("/sys/fs/cgroup", cg, "cgroup.procs"),
		filepath.Join("/sys/fs/cgroup/memory", cg, "cgroup.procs"),
	} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// readPIDs reads a cgroup.procs file.
func readPIDs(path string) ([]int, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}
