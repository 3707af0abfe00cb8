package api

import "github.com/airlock-sandbox/airlock/internal/sandbox"

// limitsBody are Airlock's extension keys of the create body (E2B takes
// CPU and memory from the template; the SDKs never send these). Omitted or
// zero values take the daemon's defaults; out-of-range values are a 400.
type limitsBody struct {
	CPUCount     int `json:"cpuCount"`
	MemoryMB     int `json:"memoryMB"`
	DiskSizeMB   int `json:"diskSizeMB"`
	MaxProcesses int `json:"maxProcesses"`
	MaxOpenFiles int `json:"maxOpenFiles"`
}

func (l limitsBody) limits() sandbox.Limits {
	return sandbox.Limits{
		CPUCount:   l.CPUCount,
		MemoryMB:   l.MemoryMB,
		DiskSizeMB: l.DiskSizeMB,
		PIDs:       l.MaxProcesses,
		OpenFiles:  l.MaxOpenFiles,
	}
}
