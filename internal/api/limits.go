package api

import (
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// toLimits maps the create body's limit keys (airlock.Limits) to the
// manager's; zero values take the daemon's defaults.
func toLimits(l airlock.Limits) sandbox.Limits {
	return sandbox.Limits{
		CPUCount:   l.CPUCount,
		MemoryMB:   l.MemoryMB,
		DiskSizeMB: l.DiskSizeMB,
		PIDs:       l.MaxProcesses,
		OpenFiles:  l.MaxOpenFiles,
	}
}
