package cli

import (
	"github.com/spf13/pflag"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// limitFlags are the `airlock serve` flags for per-sandbox resource limits.
type limitFlags struct {
	cpu, memoryMB, diskMB, pids, openFiles int
	maxCPU, maxMemoryMB, maxDiskMB         int
	diskReserveMB                          int
}

func addLimitFlags(f *pflag.FlagSet, l *limitFlags) {
	f.IntVar(&l.cpu, "default-cpu-count", sandbox.DefaultCPUCount, "CPUs of a sandbox when the create request names none")
	f.IntVar(&l.memoryMB, "default-memory-mb", sandbox.DefaultMemoryMB, "memory of a sandbox in MiB when the create request names none (exceeding it stops the sandbox)")
	f.IntVar(&l.diskMB, "default-disk-mb", sandbox.DefaultDiskSizeMB, "size in MiB of a sandbox's writable layer when the create request names none")
	f.IntVar(&l.pids, "default-max-processes", sandbox.DefaultPIDs, "processes per user inside a sandbox (RLIMIT_NPROC) when the create request names none")
	f.IntVar(&l.openFiles, "default-max-open-files", sandbox.DefaultOpenFiles, "open files per process inside a sandbox (RLIMIT_NOFILE) when the create request names none")
	f.IntVar(&l.maxCPU, "max-cpu-count", sandbox.DefaultMaxCPUCount, "largest cpuCount a create request may ask for")
	f.IntVar(&l.maxMemoryMB, "max-memory-mb", sandbox.DefaultMaxMemoryMB, "largest memoryMB a create request may ask for")
	f.IntVar(&l.maxDiskMB, "max-disk-mb", sandbox.DefaultMaxDiskMB, "largest diskSizeMB a create request may ask for")
	f.IntVar(&l.diskReserveMB, "disk-reserve-mb", sandbox.DefaultDiskReserveMB, "free space in MiB the data dir's filesystem must keep: below it creates, pauses, forks and uploads answer 507 (-1: refuse only when completely full)")
}

// apply sets the limit fields of cfg.
func (l limitFlags) apply(cfg *sandbox.Config) {
	cfg.DefaultCPUCount = l.cpu
	cfg.DefaultMemoryMB = l.memoryMB
	cfg.DefaultDiskSizeMB = l.diskMB
	cfg.DiskReserveMB = l.diskReserveMB
	if l.diskReserveMB == 0 {
		cfg.DiskReserveMB = -1 // 0 asked for explicitly: no reserve
	}
	cfg.Limits = sandbox.LimitConfig{
		DefaultPIDs:      l.pids,
		DefaultOpenFiles: l.openFiles,
		MaxCPUCount:      l.maxCPU,
		MaxMemoryMB:      l.maxMemoryMB,
		MaxDiskSizeMB:    l.maxDiskMB,
	}
}
