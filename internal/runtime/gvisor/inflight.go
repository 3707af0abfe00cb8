//go:build linux

package gvisor

import (
	"bytes"
	"os"
	"path/filepath"
)

// CheckpointInProgress reports whether a `runsc checkpoint` or `runsc
// restore` of id under this runtime's --root is running, e.g. one started by a daemon that was killed
// before it finished (implements sandbox.CheckpointWatcher). It reads
// /proc/*/cmdline.
func (r *Runtime) CheckpointInProgress(id string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil || len(raw) == 0 {
			continue
		}
		if isCheckpointOf(bytes.Split(bytes.TrimRight(raw, "\x00"), []byte{0}), r.root, id) {
			return true
		}
	}
	return false
}

// isCheckpointOf reports whether argv is `runsc … --root root …
// checkpoint|restore … id` (id last).
func isCheckpointOf(argv [][]byte, root, id string) bool {
	if len(argv) < 3 || string(argv[len(argv)-1]) != id {
		return false
	}
	hasRoot, hasCmd := false, false
	for i, a := range argv {
		switch {
		case string(a) == "--root" && i+1 < len(argv) && string(argv[i+1]) == root,
			string(a) == "--root="+root:
			hasRoot = true
		case string(a) == "checkpoint" || string(a) == "restore":
			hasCmd = true
		}
	}
	return hasRoot && hasCmd
}
