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

// stopWait bounds how long WaitStopped waits for the sandbox's processes
// to exit after SIGKILL; the teardown retries after it.
const stopWait = 10 * time.Second

// stopRounds bounds how many times Stop reads the cgroup again for
// processes that a fork in flight added while it was signalling.
const stopRounds = 50

// Stop implements runtime.Stopper: it SIGKILLs every process in the
// sandbox's cgroup (the Sentry, its systrap stubs and the gofer) and
// returns once each has been sent it, without asking runsc (a runsc
// process costs more than the kill) and without waiting for them to exit
// (WaitStopped does that, in the background teardown). A sandbox without a
// cgroup (not running, or cgroups off) is stopped with `runsc kill`.
//
// Under cgroup v2 one write to cgroup.kill does it: the kernel kills every
// process of the cgroup, forks in flight included. So it does on a hybrid
// host (this project's: v1 controllers, v2 beside them) for a sandbox
// started in its kill group (killgroup_linux.go). Otherwise, under cgroup
// v1, Stop reads cgroup.procs, signals every pid it has not
// signalled yet (pinned with a pidfd and checked to be in the cgroup, so
// a reused pid is never signalled), and reads again until a read shows no
// new pid. That is enough: a process with SIGKILL pending cannot fork (the
// kernel fails the fork under the signal lock), so a new pid can only come
// from a fork that had passed that check when its parent was signalled,
// and every process that could still fork is signalled by the time the
// reads are stable. A fork in the last instants of its parent may link
// its child into the cgroup just after the last read: such a child is a
// gVisor process (a stub or a helper, never user code: gVisor's user
// processes are not host processes), which gets no work from the dead
// Sentry, and WaitStopped signals it. The v1 freezer is not used: freezing
// waits for every task to be scheduled once, which under load is the very
// wait this avoids, and a frozen task does not die of SIGKILL before it is
// thawed.
func (r *Runtime) Stop(ctx context.Context, id, _ string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	r.unwatchMemory(id)
	r.addrs.saving(id) // dying: no more OOM guard wake-ups (wake.go)
	// One write to the kill group's cgroup.kill (killgroup_linux.go).
	if r.killGroup(id) {
		return nil
	}
	procs := r.cgroupProcsFile(id)
	if procs == "" {
		if _, err := r.exec(ctx, "kill", id, "KILL"); err != nil && !notFound(err) {
			r.log.Debug("runsc kill", "id", id, "err", err)
		}
		return nil
	}
	if killCgroupV2(filepath.Dir(procs)) {
		return nil
	}
	cg := r.cgroupsPath(id)
	signalled := map[int]bool{}
	for range stopRounds {
		pids, err := readPIDs(procs)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // cgroup removed: nothing left in it
			}
			return fmt.Errorf("stopping sandbox %s: %w", id, err)
		}
		fresh := 0
		for _, pid := range pids {
			if !signalled[pid] {
				signalled[pid] = true
				fresh++
				killInCgroup(pid, cg)
			}
		}
		if fresh == 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("stopping sandbox %s: %w", id, err)
		}
	}
	return fmt.Errorf("stopping sandbox %s: new processes kept appearing in its cgroup after %d rounds of SIGKILL", id, stopRounds)
}

// killCgroupV2 kills every process of the cgroup v2 directory dir with
// cgroup.kill, and reports whether it could (false under cgroup v1, or on
// a kernel older than 5.14).
func killCgroupV2(dir string) bool {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.kill"), os.O_WRONLY, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	_, err = f.WriteString("1")
	return err == nil
}

// WaitStopped implements runtime.Stopper: it returns once the sandbox's
// cgroup is empty (or gone), SIGKILLing whatever it still finds there, or
// an error after stopWait (the teardown retries). Destroy, which unmounts
// the root filesystem and removes the cgroups, runs after it.
func (r *Runtime) WaitStopped(ctx context.Context, id, _ string) error {
	if err := runtime.CheckID(ErrInvalidSpec, id); err != nil {
		return err
	}
	procs := r.cgroupProcsFile(id)
	if procs == "" {
		return nil // no cgroup: Destroy's runsc kill and delete do it
	}
	cg := r.cgroupsPath(id)
	deadline := time.Now().Add(stopWait)
	for {
		pids, err := readPIDs(procs)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // cgroup removed: nothing left in it
			}
			return fmt.Errorf("waiting for sandbox %s to stop: %w", id, err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			killInCgroup(pid, cg)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for sandbox %s to stop: %d processes still in its cgroup %v after SIGKILL", id, len(pids), stopWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for sandbox %s to stop: %w", id, ctx.Err())
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
