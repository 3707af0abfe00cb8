//go:build linux

package gvisor

import (
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The daemon samples every running sandbox every 5 s (internal/metrics).
// A sample used to be a `runsc events --stats`: a fork and exec of runsc on
// the host, and an RPC that the sandbox's Sentry serves (it walks its
// memory file with mincore and allocates enough to run its garbage
// collector). A CPU profile of an idle interpreter sandbox's Sentry showed
// those RPCs as half of what it still used, and on the host the runsc
// processes cost more than the sandbox itself (bench/density: the daemon's
// share per sandbox). A sandbox that did not run does not change what the
// sample reports, and the host sees that for free in the sandbox's cgroups:
// while its CPU time grew by less than statsIdleCPU of the time since the
// last full sample, and its memory by less than statsIdleMem either way,
// Stats answers the last sample again (with the new time) for up to
// statsMaxAge. What the host cannot see is tasks started and ended without
// using that CPU; they show at the next full sample.
const (
	// statsIdleCPU is the share of a core below which a sandbox counts as
	// idle (its Sentry alone uses 0.05-0.1 % when nothing runs).
	statsIdleCPU = 0.005
	// statsIdleMem is the host memory change that forces a full sample.
	statsIdleMem = 1 << 20
	// statsMaxAge bounds how old a repeated sample may be.
	statsMaxAge = time.Minute
)

// hostUsage is what the host's cgroups say a sandbox used: CPU time (ns)
// and memory (bytes); ok is false when either is unreadable.
type hostUsage struct {
	cpuNs, mem uint64
	ok         bool
}

// hostUsage reads the sandbox's CPU and memory cgroups (v1, or v2).
func (r *Runtime) hostUsage(id string) hostUsage {
	cg := r.cgroupsPath(id)
	cpu, err1 := readUint(filepath.Join("/sys/fs/cgroup/cpuacct", cg, "cpuacct.usage"))
	mem, err2 := readUint(filepath.Join("/sys/fs/cgroup/memory", cg, "memory.usage_in_bytes"))
	if err1 == nil && err2 == nil {
		return hostUsage{cpuNs: cpu, mem: mem, ok: true}
	}
	v2 := filepath.Join("/sys/fs/cgroup", cg)
	usec := statField(filepath.Join(v2, "cpu.stat"), "usage_usec")
	mem, err := readUint(filepath.Join(v2, "memory.current"))
	if usec == 0 || err != nil {
		return hostUsage{}
	}
	return hostUsage{cpuNs: usec * 1000, mem: mem, ok: true}
}

// statsMemo is one sandbox's last full sample and the host's readings then.
type statsMemo struct {
	st   runtime.Stats
	host hostUsage
}

// statsMemos holds the last full sample of each sandbox.
type statsMemos struct {
	// mu guards m.
	mu sync.Mutex
	m  map[string]statsMemo
}

// get returns the last full sample of id, timed now, if the sandbox has
// been idle since (see above).
func (s *statsMemos) get(id string, host hostUsage, now time.Time) (runtime.Stats, bool) {
	if !host.ok {
		return runtime.Stats{}, false
	}
	s.mu.Lock()
	e, ok := s.m[id]
	s.mu.Unlock()
	if !ok || !e.host.ok {
		return runtime.Stats{}, false
	}
	since := now.Sub(e.st.Time)
	if since < 0 || since >= statsMaxAge || host.cpuNs < e.host.cpuNs {
		return runtime.Stats{}, false
	}
	if float64(host.cpuNs-e.host.cpuNs) >= statsIdleCPU*float64(since.Nanoseconds()) {
		return runtime.Stats{}, false
	}
	if d := int64(host.mem) - int64(e.host.mem); d >= statsIdleMem || d <= -statsIdleMem {
		return runtime.Stats{}, false
	}
	st := e.st
	st.Time = now
	return st, true
}

// put records a full sample of id.
func (s *statsMemos) put(id string, host hostUsage, st runtime.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]statsMemo{}
	}
	s.m[id] = statsMemo{st: st, host: host}
}

// forget drops id (the sandbox is gone, or a restore replaced it).
func (s *statsMemos) forget(id string) {
	s.mu.Lock()
	delete(s.m, id)
	s.mu.Unlock()
}
