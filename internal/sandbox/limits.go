package sandbox

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Defaults and bounds of the per-sandbox limits (LimitConfig zero values).
//
// Processes are kept low on purpose: under gVisor's ptrace platform every
// guest task costs up to ~30 host tasks, and the host's kernel.pid_max
// (often 32768) is shared by everything on the machine.
const (
	DefaultPIDs         = 256
	DefaultOpenFiles    = 65536
	DefaultMaxCPUCount  = 8
	DefaultMaxMemoryMB  = 8192
	DefaultMaxDiskMB    = 51200
	DefaultMaxPIDs      = 1024
	DefaultMaxOpenFiles = 1 << 20

	minMemoryMB  = 128
	minDiskMB    = 64
	minPIDs      = 16
	minOpenFiles = 64
)

// LimitConfig holds the limits of Config that have no field of their own:
// defaults for processes and open files and the largest values a create
// request may ask for. Zero fields take the Default* constants.
type LimitConfig struct {
	DefaultPIDs      int
	DefaultOpenFiles int
	MaxCPUCount      int
	MaxMemoryMB      int
	MaxDiskSizeMB    int
	MaxPIDs          int
	MaxOpenFiles     int
}

// Limits are per-sandbox resource limits; a zero field means the daemon's
// default.
type Limits struct {
	CPUCount   int // CPUs (CFS quota of whole CPUs)
	MemoryMB   int // guest memory; exceeding it stops the whole sandbox
	DiskSizeMB int // size of the writable layer
	PIDs       int // processes per user inside the sandbox (RLIMIT_NPROC)
	OpenFiles  int // open files per process (RLIMIT_NOFILE)
}

// resolveLimits fills req's zero fields with the daemon defaults and checks
// every value against its bounds (400 user errors).
func (m *Manager) resolveLimits(req Limits) (Limits, error) {
	lc := m.cfg.Limits
	l := Limits{
		CPUCount:   orDefault(req.CPUCount, m.cfg.DefaultCPUCount),
		MemoryMB:   orDefault(req.MemoryMB, m.cfg.DefaultMemoryMB),
		DiskSizeMB: orDefault(req.DiskSizeMB, m.cfg.DefaultDiskSizeMB),
		PIDs:       orDefault(req.PIDs, orDefault(lc.DefaultPIDs, DefaultPIDs)),
		OpenFiles:  orDefault(req.OpenFiles, orDefault(lc.DefaultOpenFiles, DefaultOpenFiles)),
	}
	for _, c := range []struct {
		name      string
		v, lo, hi int
	}{
		{"cpuCount", l.CPUCount, 1, orDefault(lc.MaxCPUCount, DefaultMaxCPUCount)},
		{"memoryMB", l.MemoryMB, minMemoryMB, orDefault(lc.MaxMemoryMB, DefaultMaxMemoryMB)},
		{"diskSizeMB", l.DiskSizeMB, minDiskMB, orDefault(lc.MaxDiskSizeMB, DefaultMaxDiskMB)},
		{"maxProcesses", l.PIDs, minPIDs, orDefault(lc.MaxPIDs, DefaultMaxPIDs)},
		{"maxOpenFiles", l.OpenFiles, minOpenFiles, orDefault(lc.MaxOpenFiles, DefaultMaxOpenFiles)},
	} {
		if c.v < c.lo || c.v > c.hi {
			return Limits{}, userErrorf(http.StatusBadRequest, "%s must be between %d and %d, got %d", c.name, c.lo, c.hi, c.v)
		}
	}
	return l, nil
}

// resources converts resolved limits for the runtime.
func (l Limits) resources() runtime.Resources {
	return runtime.Resources{
		CPUCount:  l.CPUCount,
		MemoryMB:  l.MemoryMB,
		PIDs:      l.PIDs,
		DiskMB:    l.DiskSizeMB,
		OpenFiles: l.OpenFiles,
	}
}
