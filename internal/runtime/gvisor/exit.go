//go:build linux

package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var (
	_ runtime.StateLister  = (*Runtime)(nil)
	_ runtime.StopReasoner = (*Runtime)(nil)
)

// States implements runtime.StateLister with one `runsc list`. A running
// sandbox without a memory watcher (one a previous daemon started) gets one
// (memwatch.go).
func (r *Runtime) States(ctx context.Context) (map[string]runtime.State, error) {
	out, err := r.exec(ctx, "list", "--format=json")
	if err != nil {
		return nil, err
	}
	var states []runscState
	if err := json.Unmarshal(out, &states); err != nil {
		return nil, fmt.Errorf("parsing runsc list: %w", err)
	}
	m := make(map[string]runtime.State, len(states))
	for _, s := range states {
		switch s.Status {
		case "running":
			m[s.ID] = runtime.StateRunning
			r.ensureWatched(s.ID)
		case "paused":
			m[s.ID] = runtime.StatePaused
		default:
			m[s.ID] = runtime.StateStopped
		}
	}
	return m, nil
}

// StopReason implements runtime.StopReasoner from the sandbox's host
// cgroups, which outlive its processes until Destroy: this runsc has no OOM
// killer of its own, so a guest over its memory limit makes the host kill
// the sentry (memory.oom_control "oom_kill" > 0), and a guest over the host
// task limit makes the sentry fail to create threads and exit
// (pids.events "max" > 0).
func (r *Runtime) StopReason(id string) string {
	if runtime.CheckID(ErrInvalidSpec, id) != nil {
		return ""
	}
	cg := r.cgroupsPath(id)
	if statField(filepath.Join("/sys/fs/cgroup/memory", cg, "memory.oom_control"), "oom_kill") > 0 ||
		statField(filepath.Join("/sys/fs/cgroup", cg, "memory.events"), "oom_kill") > 0 {
		return "it exceeded its memory limit"
	}
	if statField(filepath.Join("/sys/fs/cgroup/pids", cg, "pids.events"), "max") > 0 ||
		statField(filepath.Join("/sys/fs/cgroup", cg, "pids.events"), "max") > 0 {
		return "it exceeded the host task limit"
	}
	return ""
}
