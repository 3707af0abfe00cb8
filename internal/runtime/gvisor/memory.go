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
// limit to the cgroup, so the result is always bundle + headroom.
func raiseHostMemory(id, dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return fmt.Errorf("reading the bundle of %s: %w", id, err)
	}
	var s specs.Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("parsing the bundle of %s: %w", id, err)
	}
	if s.Linux == nil || s.Linux.Resources == nil || s.Linux.Resources.Memory == nil || s.Linux.Resources.Memory.Limit == nil {
		return nil
	}
	limit := strconv.FormatInt(*s.Linux.Resources.Memory.Limit+oomGuardHeadroom, 10)
	cg := cgroupsPath(id)
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
		return nil
	}
	return nil // no memory cgroup (runsc --ignore-cgroups): nothing to raise
}
