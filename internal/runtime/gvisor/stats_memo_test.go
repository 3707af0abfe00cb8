//go:build linux

package gvisor

import (
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// A repeated sample is answered only while the host saw the sandbox idle:
// CPU under statsIdleCPU of the time since the full sample, memory within
// statsIdleMem, for at most statsMaxAge.
func TestStatsMemoIdleOnly(t *testing.T) {
	t0 := time.Unix(1000, 0)
	full := runtime.Stats{Time: t0, CPUUsageNs: 5e9, MemoryUsed: 100 << 20, PIDs: 7}
	base := hostUsage{cpuNs: 1e9, mem: 150 << 20, ok: true}
	var m statsMemos
	if _, ok := m.get("a", base, t0.Add(5*time.Second)); ok {
		t.Fatal("a sample answered before any full one")
	}
	m.put("a", base, full)

	at := t0.Add(5 * time.Second)
	idle := hostUsage{cpuNs: base.cpuNs + 2e6, mem: base.mem + 4096, ok: true} // 2 ms in 5 s: 0.04 %
	st, ok := m.get("a", idle, at)
	if !ok {
		t.Fatal("an idle sandbox was not answered from the last sample")
	}
	if !st.Time.Equal(at) || st.CPUUsageNs != full.CPUUsageNs || st.MemoryUsed != full.MemoryUsed || st.PIDs != full.PIDs {
		t.Fatalf("repeated sample %+v, want %+v at %v", st, full, at)
	}

	for _, c := range []struct {
		name string
		host hostUsage
		at   time.Time
	}{
		{"CPU over 0.5 % of a core", hostUsage{cpuNs: base.cpuNs + 30e6, mem: base.mem, ok: true}, at},
		{"memory grew 1 MiB", hostUsage{cpuNs: base.cpuNs, mem: base.mem + 1<<20, ok: true}, at},
		{"memory fell 1 MiB", hostUsage{cpuNs: base.cpuNs, mem: base.mem - 1<<20, ok: true}, at},
		{"the full sample is a minute old", idle, t0.Add(statsMaxAge)},
		{"the CPU counter went back (a new cgroup)", hostUsage{cpuNs: base.cpuNs - 1, mem: base.mem, ok: true}, at},
		{"no cgroup readings", hostUsage{}, at},
	} {
		if _, ok := m.get("a", c.host, c.at); ok {
			t.Errorf("%s: answered from the last sample, want a full one", c.name)
		}
	}
	m.forget("a")
	if _, ok := m.get("a", idle, at); ok {
		t.Fatal("answered after forget")
	}
}
