//go:build linux

package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// raiseHostMemory gives the host memory cgroup of the sandbox in dir the OOM
// guard's headroom on top of the limit its bundle sets (see
// oomGuardHeadroom). It runs after every start, restore and boot: runsc has
// by then sized the guest from the bundle's limit and (re)applied that
// limit to the cgroup, so the result is always bundle + headroom. It also
// starts the watcher that wakes the guard when the cgroup's memory grows.
func (r *Runtime) raiseHostMemory(id, dir string) error {
	bl, ok := bundleMemoryLimit(dir)
	if !ok {
		return fmt.Errorf("no memory limit in the bundle of %s", id)
	}
	limit := strconv.FormatUint(bl+oomGuardHeadroom, 10)
	cg := r.cgroupsPath(id)
	for _, f := range []string{
		filepath.Join("/sys/fs/cgroup/memory", cg, "memory.limit_in_bytes"), // v1
		filepath.Join("/sys/fs/cgroup", cg, "memory.max"),                   // v2
	} {
		if _, err := os.Stat(f); err != nil {
			continue
		}
		if err := os.WriteFile(f, []byte(limit), 0o644); err != nil {
			return fmt.Errorf("raising the host memory limit of %s: %w", id, err)
		}
		r.watchMemory(id) // wakes the guard when memory grows (memwatch.go)
		return nil
	}
	return nil // no memory cgroup (runsc --ignore-cgroups): nothing to raise
}

// bundleMemoryLimit is the host memory limit the sandbox's bundle in dir
// sets (guest memory + hostMemoryOverhead).
func bundleMemoryLimit(dir string) (uint64, bool) {
	if dir == "" {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, false
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return 0, false
	}
	if s.Linux == nil || s.Linux.Resources == nil || s.Linux.Resources.Memory == nil ||
		s.Linux.Resources.Memory.Limit == nil || *s.Linux.Resources.Memory.Limit <= 0 {
		return 0, false
	}
	return uint64(*s.Linux.Resources.Memory.Limit), true
}
