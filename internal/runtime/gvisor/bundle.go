package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Defaults applied when a Spec leaves a resource at zero.
const (
	DefaultMemoryMB = 512
	DefaultCPUCount = 2
	DefaultPIDs     = 1024
	// DefaultOpenFiles is RLIMIT_NOFILE when Resources.OpenFiles is zero.
	DefaultOpenFiles = 1 << 20
	// DefaultDiskMB is the size of the writable layer when Resources.DiskMB
	// is zero and Config.DiskMB is zero too.
	DefaultDiskMB = 5120

	cpuPeriodUs = 100000
	// The host pids cgroup limit is hostPidsPerGuest*PIDs+hostPidsOverhead.
	// runsc applies the OCI pids limit to the host cgroup of the sentry and
	// gofer; with the ptrace platform every guest process is a host stub
	// process with about one thread per sentry OS thread (measured: 60
	// idle guest processes = 566 host tasks; a fork bomb held at 64 guest
	// processes by RLIMIT_NPROC plateaus at ~1760 host tasks, the retrying
	// forks keep more sentry threads busy). When that limit is hit the
	// sentry panics and the whole sandbox dies, so it is only the host's
	// fork-bomb guard, sized so that a guest at its own limit stays below
	// it. The guest limit itself is enforced inside gVisor with
	// RLIMIT_NPROC, which makes fork/clone fail with EAGAIN like on Linux.
	hostPidsPerGuest = 32
	hostPidsOverhead = 1024
	// hostMemoryOverhead is added to the guest's memory for the host
	// memory cgroup, which also holds the sentry and gofer (~50 MB RSS).
	// runsc sizes the guest's MemTotal from this limit.
	hostMemoryOverhead = 64 << 20
	// oomGuardHeadroom is added to the host cgroup's limit once the
	// sandbox runs (memory.go; after MemTotal was fixed). runsc has no OOM
	// killer of its own: when the cgroup hits its limit the host kills
	// the sentry, i.e. the whole sandbox. So the agent runs one
	// (internal/envd/oomguard, AIRLOCK_OOM_GUARD_MB): it kills the largest
	// process once the guest's processes hold more than the sandbox's
	// memory, checked every 20 ms while memory is within reach of the
	// limit or grew (memwatch.go), and the headroom lets it act before
	// the host does (a guest allocating 100 MB chunks gains ~100-200 MB
	// between two checks on a quiet host, and 256 MiB was not enough on a
	// host at load 20-60, where the guard's goroutine waited for the CPU
	// while a bomb kept allocating: the whole sandbox died). Memory no
	// process holds still meets the host limit: that sandbox is stopped
	// and reported. The headroom bounds what a sandbox can hold beyond
	// its limit on the host; it reserves nothing.
	oomGuardHeadroom = 768 << 20
	// oomGuardEnv turns the guard on (internal/envd/oomguard.EnvLimit;
	// the host side names it without importing the agent's packages).
	oomGuardEnv = "AIRLOCK_OOM_GUARD_MB"
	// defaultPath is prepended to the agent's environment when spec.Env
	// carries no PATH.
	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// ociVersion is what the Debian runsc (2022) understands.
	ociVersion = "1.0.2"
)

// guestCaps are the capabilities of the agent (uid 0 inside the sandbox):
// the usual container default set. gVisor's sentry is the isolation
// boundary, so these only matter inside the sandbox kernel.
var guestCaps = []string{
	"CAP_AUDIT_WRITE", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_MKNOD", "CAP_NET_BIND_SERVICE",
	"CAP_NET_RAW", "CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP",
	"CAP_SETUID", "CAP_SYS_CHROOT",
}

// limits are the effective resource limits of one sandbox.
type limits struct {
	memoryBytes int64
	cpus        int
	pids        int64
	diskMB      int
	openFiles   uint64
}

func effectiveLimits(r runtime.Resources, defaultDiskMB int) limits {
	l := limits{
		memoryBytes: int64(r.MemoryMB) << 20,
		cpus:        r.CPUCount,
		pids:        int64(r.PIDs),
		diskMB:      r.DiskMB,
		openFiles:   uint64(max(r.OpenFiles, 0)),
	}
	if l.openFiles == 0 {
		l.openFiles = DefaultOpenFiles
	}
	if l.memoryBytes <= 0 {
		l.memoryBytes = DefaultMemoryMB << 20
	}
	if l.cpus <= 0 {
		l.cpus = DefaultCPUCount
	}
	if l.pids <= 0 {
		l.pids = DefaultPIDs
	}
	if l.diskMB == 0 {
		l.diskMB = defaultDiskMB
	}
	return l
}

// cgroupsPath is the cgroup (relative to each controller's root) that runsc
// puts a sandbox in.
func (r *Runtime) cgroupsPath(id string) string { return "/" + r.cgroupParent + "/" + id }

// buildSpec returns the OCI runtime spec for one sandbox whose merged root
// filesystem is rootfs.
func buildSpec(spec runtime.Spec, rootfs string, l limits, cgroup string) *specs.Spec {
	env := slices.Clone(spec.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{defaultPath}, env...)
	}
	env = append(env, oomGuardEnv+"="+strconv.FormatInt(l.memoryBytes>>20, 10), oomGuardWakeEnv)
	quota := int64(l.cpus) * cpuPeriodUs
	period := uint64(cpuPeriodUs)
	mem := l.memoryBytes + hostMemoryOverhead
	hostPids := l.pids*hostPidsPerGuest + hostPidsOverhead
	hostname := spec.Hostname
	if hostname == "" {
		hostname = spec.ID
	}
	s := &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: 0, GID: 0},
			Args:     []string{runtime.AgentGuestPath},
			Env:      env,
			Cwd:      "/",
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  guestCaps,
				Effective: guestCaps,
				Permitted: guestCaps,
			},
			Rlimits: []specs.POSIXRlimit{
				{Type: "RLIMIT_NOFILE", Hard: l.openFiles, Soft: l.openFiles},
				// Per uid inside the sandbox; the agent (uid 0) has no
				// CAP_SYS_RESOURCE, so it is bound by it too.
				{Type: "RLIMIT_NPROC", Hard: uint64(l.pids), Soft: uint64(l.pids)},
			},
		},
		Root:     &specs.Root{Path: rootfs, Readonly: false},
		Hostname: hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			// runsc mounts a tmpfs (RAM) on /tmp unless the spec has a /tmp
			// mount; keep /tmp on the writable layer instead.
			{Destination: "/tmp", Type: "bind", Source: filepath.Join(rootfs, "tmp"), Options: []string{"rbind", "rw"}},
			{Destination: runtime.AgentGuestPath, Type: "bind", Source: spec.AgentPath, Options: []string{"rbind", "ro"}},
		},
		Linux: &specs.Linux{
			CgroupsPath: cgroup,
			Resources: &specs.LinuxResources{
				Memory: &specs.LinuxMemory{Limit: &mem},
				CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
				Pids:   &specs.LinuxPids{Limit: &hostPids},
			},
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace, Path: spec.NetNSPath},
			},
		},
	}
	// Volumes: bind mounts that the gofer serves. runsc's default
	// --file-access-mounts=shared revalidates their cached files against
	// the host, so what another sandbox (or the content API) wrote there is
	// seen at once.
	for _, m := range spec.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: []string{"rbind", mode, "nosuid", "nodev"}})
	}
	// runsc forces PR_SET_NO_NEW_PRIVS on every process, so the setuid sudo
	// binary cannot work; the agent answers `sudo` instead (internal/envd/sudo).
	if fi, err := os.Lstat(filepath.Join(rootfs, "usr/bin/sudo")); err == nil && fi.Mode().IsRegular() {
		s.Mounts = append(s.Mounts, specs.Mount{Destination: "/usr/bin/sudo", Type: "bind", Source: spec.AgentPath, Options: []string{"rbind", "ro"}})
	}
	return s
}

func writeBundle(dir string, s *specs.Spec) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding OCI spec: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o600); err != nil {
		return fmt.Errorf("writing OCI spec: %w", err)
	}
	return nil
}

// MountsVolumes implements runtime.VolumeMounter: Spec.Mounts become bind
// mounts served by the gofer (buildSpec).
func (r *Runtime) MountsVolumes() bool { return true }
