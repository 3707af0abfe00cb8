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
// in the v2 hierarchy. Stop then kills them all with one write to the
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
	dir := r.killGroupDir(id)
	if dir == "" {
		return false
	}
	if _, ok := r.groups.started.Load(id); !ok {
		// Re-attached after a restart: the group counts only if it holds
		// the processes.
		pids, err := readPIDs(filepath.Join(dir, "cgroup.procs"))
		if err != nil || len(pids) == 0 {
			return false
		}
	}
	return killCgroupV2(dir)
}

// forgetKillGroup drops id's record (Destroy; removeCgroups removes the
// directory).
func (r *Runtime) forgetKillGroup(id string) { r.groups.started.Delete(id) }
