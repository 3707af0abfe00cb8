package gvisor

import (
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

func TestBuildSpec(t *testing.T) {
	spec := runtime.Spec{
		ID: "abc", AgentPath: "/opt/envd", NetNSPath: "/var/run/netns/airlock-abc",
		Env:       []string{"FOO=bar"},
		Resources: runtime.Resources{CPUCount: 3, MemoryMB: 256, PIDs: 99, OpenFiles: 4096},
	}
	s := buildSpec(spec, "/d/rootfs", effectiveLimits(spec.Resources, 0), "/airlock/"+spec.ID)
	if got := s.Process.Args; !slices.Equal(got, []string{runtime.AgentGuestPath}) {
		t.Errorf("args = %v", got)
	}
	if s.Process.Env[0] != defaultPath || s.Process.Env[1] != "FOO=bar" {
		t.Errorf("env = %v", s.Process.Env)
	}
	if s.Hostname != "abc" || s.Root.Path != "/d/rootfs" || s.Root.Readonly {
		t.Errorf("hostname %q root %+v", s.Hostname, s.Root)
	}
	res := s.Linux.Resources
	if *res.Memory.Limit != 256<<20+hostMemoryOverhead || *res.CPU.Quota != 300000 || *res.CPU.Period != 100000 || *res.Pids.Limit != 99*hostPidsPerGuest+hostPidsOverhead {
		t.Errorf("resources: mem %d quota %d period %d pids %d", *res.Memory.Limit, *res.CPU.Quota, *res.CPU.Period, *res.Pids.Limit)
	}
	nproc := slices.IndexFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_NPROC" })
	if nproc < 0 || s.Process.Rlimits[nproc].Hard != 99 || s.Process.Rlimits[nproc].Soft != 99 {
		t.Errorf("rlimits = %+v, want RLIMIT_NPROC 99", s.Process.Rlimits)
	}
	nofile := slices.IndexFunc(s.Process.Rlimits, func(r specs.POSIXRlimit) bool { return r.Type == "RLIMIT_NOFILE" })
	if nofile < 0 || s.Process.Rlimits[nofile].Hard != 4096 || s.Process.Rlimits[nofile].Soft != 4096 {
		t.Errorf("rlimits = %+v, want RLIMIT_NOFILE 4096", s.Process.Rlimits)
	}
	if s.Linux.CgroupsPath != "/airlock/abc" {
		t.Errorf("cgroupsPath = %q", s.Linux.CgroupsPath)
	}
	var netPath string
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			netPath = ns.Path
		}
	}
	if netPath != spec.NetNSPath {
		t.Errorf("network namespace path = %q", netPath)
	}
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == runtime.AgentGuestPath })
	if i < 0 || s.Mounts[i].Source != "/opt/envd" || !slices.Contains(s.Mounts[i].Options, "ro") {
		t.Errorf("agent mount missing or writable: %+v", s.Mounts)
	}

	d := effectiveLimits(runtime.Resources{}, 0)
	if d.memoryBytes != DefaultMemoryMB<<20 || d.cpus != DefaultCPUCount || d.pids != DefaultPIDs || d.diskMB != 0 || d.openFiles != DefaultOpenFiles {
		t.Errorf("defaults = %+v", d)
	}
	withPath := buildSpec(runtime.Spec{ID: "x", Env: []string{"PATH=/x"}}, "/r", d, "/airlock/x")
	// The agent's OOM guard gets the sandbox's memory (the variable
	// internal/envd/oomguard reads), and is told that the host wakes it.
	if !slices.Equal(withPath.Process.Env, []string{"PATH=/x", "AIRLOCK_OOM_GUARD_MB=512", "AIRLOCK_OOM_GUARD_WAKE=SIGUSR2"}) {
		t.Errorf("env with PATH = %v, want PATH, the OOM guard's limit and its wake-up", withPath.Process.Env)
	}
}
