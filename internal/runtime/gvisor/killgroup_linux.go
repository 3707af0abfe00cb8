//go:build linux

package gvisor

import (
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// Kill groups (issue 24): on a host with cgroup v1 controllers and the v2
// hierarchy mounted beside them without controllers (/sys/fs/cgroup/unified,
// "hybrid": this project's hosts), runsc puts a sandbox's processes into
// cgroups of the v1 controllers only, and v1 has no cgroup.kill: Stop had
// to read cgroup.procs and signal each of the ~16 processes (Sentry, gofer,
// systrap stubs) through a pidfd after checking /proc/<pid>/cgroup, about
// 130 system calls, each a chance to wait for a core under load (stop p50
// 118 ms in the 20-client soak at a load average of 55).
//
// So runDetached starts `runsc run` and `runsc restore` directly in a v2
// cgroup of their own, <unified>/<cgroup parent>/<id> (clone3 with
// CLONE_INTO_CGROUP: no window in which a process is outside it), and
// every process runsc starts for the sandbox inherits it: v1 and v2
// memberships are independent, and runsc in v1 mode never moves a process
// in the v2 hierarchy. Stop then signals them all from the group's
// cgroup.procs through pidfds (signalKillGroup), and WaitStopped writes the
// group's cgroup.kill, which the kernel applies to forks in flight too.
// The group has no controllers: it limits and accounts nothing. Destroy's
// removeCgroups removes it with the others.
//
// A group is used only when this run started the sandbox in it (groups) or,
// for a sandbox re-attached after a restart, when it holds processes: a
// start whose clone3 into it failed falls back to no group, and its
// directory is removed, so an empty group never stands for a sandbox whose
// processes are elsewhere. On a pure v2 host runsc's own cgroup has
// cgroup.kill (killCgroupV2) and no group is made.

// unifiedRoot is where a hybrid host mounts the v2 hierarchy.
const unifiedRoot = "/sys/fs/cgroup/unified"

// hybridCgroups reports whether /sys/fs/cgroup holds v1 controllers and
// unifiedRoot a v2 hierarchy.
var hybridCgroups = sync.OnceValue(func() bool {
	var root, uni unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &root) != nil || unix.Statfs(unifiedRoot, &uni) != nil {
		return false
	}
	return root.Type != unix.CGROUP2_SUPER_MAGIC && uni.Type == unix.CGROUP2_SUPER_MAGIC
})

// killGroups are the sandboxes this run started in their kill group.
type killGroups struct{ started sync.Map } // id → struct{}

// killGroupDir is the kill group of sandbox id, or "" on a host that has
// none.
func (r *Runtime) killGroupDir(id string) string {
	if !hybridCgroups() {
		return ""
	}
	return filepath.Join(unifiedRoot, r.cgroupsPath(id))
}

// openKillGroup creates the kill group of id and returns it open, for
// clone3's CLONE_INTO_CGROUP, or nil when the host has none or it cannot
// be made (the sandbox then starts without one).
func (r *Runtime) openKillGroup(id string) *os.File {
	dir := r.killGroupDir(id)
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.log.Debug("no kill group", "id", id, "err", err)
		return nil
	}
	f, err := os.OpenFile(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.log.Debug("no kill group", "id", id, "err", err)
		return nil
	}
	return f
}

// startedInKillGroup records whether id's processes were started in its kill
// group; when they were not, the group's directory goes (it is empty).
func (r *Runtime) startedInKillGroup(id string, in bool) {
	if in {
		r.groups.started.Store(id, struct{}{})
		return
	}
	r.groups.started.Delete(id)
	if dir := r.killGroupDir(id); dir != "" {
		_ = os.Remove(dir)
	}
}

// killGroup SIGKILLs every process of id's kill group with one write to its
// cgroup.kill, and reports whether it did (false: no group, or one that
// does not hold the sandbox's processes).
func (r *Runtime) killGroup(id string) bool {
	dir := r.usableKillGroup(id)
	return dir != "" && killCgroupV2(dir)
}

// usableKillGroup is id's kill group when it holds the sandbox's processes,
// else "".
func (r *Runtime) usableKillGroup(id string) string {
	dir := r.killGroupDir(id)
	if dir == "" {
		return ""
	}
	if _, ok := r.groups.started.Load(id); !ok {
		// Re-attached after a restart: the group counts only if it holds
		// the processes.
		pids, err := readPIDs(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(pids) == 0 {
			return ""
		}
	}
	return dir
}

// signalKillGroup SIGKILLs every process of id's kill group through pidfds,
// and reports whether it could (false: no usable group, or its
// cgroup.procs could not be read; Stop then writes cgroup.kill).
//
// Why not cgroup.kill (issue 24): a write to cgroup.kill takes the kernel's
// cgroup_mutex, one lock for every cgroup of the host, which creates (runsc
// making and joining cgroups, each join waiting for an RCU grace period
// under it) and background teardowns (removing cgroups) hold: in the
// 20-client soak the write took 20–280 ms in a third of the kills, most of
// the kill's time inside the daemon. Reading cgroup.procs, pidfd_open and
// pidfd_send_signal take no global lock. (Nor does this read
// /proc/<pid>/cgroup, as the per-pid v1 path does: that read takes
// cgroup_mutex too.) A pid is pinned with a pidfd, then signalled only if a
// read after the pinning still lists it, so a pid that exited and was reused
// meanwhile is never signalled (a process listed in the group is the
// sandbox's). Rounds until a read shows no new pid, as in Stop's v1 path.
func (r *Runtime) signalKillGroup(id string) bool {
	dir := r.usableKillGroup(id)
	if dir == "" {
		return false
	}
	procs := filepath.Join(dir, "cgroup.procs")
	ok, _ := signalProcs(procs)
	return ok
}

// signalProcs SIGKILLs every process a cgroup.procs file lists, pinned and
// checked as signalKillGroup says, and reports whether it could read the
// file, and how many processes it signalled.
func signalProcs(procs string) (bool, int) {
	signalled := map[int]bool{}
	sent := 0
	for range stopRounds {
		pids, err := readPIDs(procs)
		if err != nil {
			return false, sent
		}
		pinned := map[int]int{} // pid → pidfd
		for _, pid := range pids {
			if signalled[pid] {
				continue
			}
			signalled[pid] = true
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				pinned[pid] = fd
			}
		}
		if len(pinned) == 0 {
			return true, sent
		}
		again, err := readPIDs(procs)
		listed := map[int]bool{}
		for _, pid := range again {
			listed[pid] = true
		}
		for pid, fd := range pinned {
			if err == nil && listed[pid] && unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil {
				sent++
			}
			unix.Close(fd)
		}
		if err != nil {
			return false, sent
		}
	}
	return true, sent
}

// forgetKillGroup drops id's record (Destroy; removeCgroups removes the
// directory).
func (r *Runtime) forgetKillGroup(id string) { r.groups.started.Delete(id) }
