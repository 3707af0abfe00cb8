//go:build linux

package microvm

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cgroupRoot is the cgroup v1 hierarchy root; each controller is mounted
// below it (the layout of these hosts and of systemd's legacy mode).
var cgroupRoot = "/sys/fs/cgroup"

// cgroupParent groups the VMMs' cgroups under each controller.
const cgroupParent = "airlock-microvm"

// vmmMemoryOverheadMB is what the VMM needs on top of guest RAM (QEMU's
// own heap, TCG's translation cache, device buffers).
const vmmMemoryOverheadMB = 384

// vmmTasks caps the VMM's threads (vCPUs, I/O and RCU threads).
const vmmTasks = 256

// cgroupLimits are the host-side limits of one VMM.
type cgroupLimits struct {
	MemoryMB int // guest RAM; the cgroup allows vmmMemoryOverheadMB more
	CPUs     int // CPU quota in whole CPUs
}

// cgroupDir is the VMM's cgroup of controller ctrl.
func cgroupDir(ctrl, id string) string { return filepath.Join(cgroupRoot, ctrl, cgroupParent, id) }

// createCgroups creates the VMM's memory, cpu and pids cgroups with l and
// returns their cgroup.procs files (the jail script joins them before it
// execs the VMM). Controllers that are not mounted are skipped.
func createCgroups(id string, l cgroupLimits) ([]string, error) {
	settings := map[string]map[string]string{
		"memory": {"memory.limit_in_bytes": strconv.FormatInt(int64(l.MemoryMB+vmmMemoryOverheadMB)<<20, 10)},
		"cpu":    {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": strconv.Itoa(l.CPUs * 100000)},
		"pids":   {"pids.max": strconv.Itoa(vmmTasks)},
	}
	var procs []string
	for _, ctrl := range []string{"memory", "cpu", "pids"} {
		if _, err := os.Stat(filepath.Join(cgroupRoot, ctrl, "cgroup.procs")); err != nil {
			continue
		}
		dir := cgroupDir(ctrl, id)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return procs, fmt.Errorf("creating cgroup %s: %w", dir, err)
		}
		for file, v := range settings[ctrl] {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0o644); err != nil {
				return procs, fmt.Errorf("setting %s/%s: %w", dir, file, err)
			}
		}
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	return procs, nil
}

// removeCgroups removes the VMM's cgroups. A SIGKILLed VMM leaves its
// cgroup only once all its threads have exited and its memory is freed,
// which for a VM that touched hundreds of MB of guest RAM can take a
// moment after its main thread is gone (EBUSY meanwhile): tasks still
// listed are killed again and the removal is retried for a few seconds.
func removeCgroups(id string) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var errs []error
		busy := false
		for _, ctrl := range []string{"memory", "cpu", "pids"} {
			err := os.Remove(cgroupDir(ctrl, id))
			if err == nil || errors.Is(err, os.ErrNotExist) {
				continue
			}
			if errors.Is(err, syscall.EBUSY) {
				busy = true
				killTasks(filepath.Join(cgroupDir(ctrl, id), "cgroup.procs"))
			}
			errs = append(errs, err)
		}
		if len(errs) == 0 || !busy || time.Now().After(deadline) {
			return errors.Join(errs...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killTasks SIGKILLs the processes listed in a cgroup.procs file (the
// VMM's own cgroup: nothing else is ever put there).
func killTasks(procs string) {
	b, err := os.ReadFile(procs)
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// oomKilled reports whether the kernel's OOM killer acted in the VMM's
// memory cgroup.
func oomKilled(id string) bool {
	f, err := os.Open(filepath.Join(cgroupDir("memory", id), "memory.oom_control"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n > 0
		}
	}
	return false
}
