//go:build linux

package gvisor

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// TestInheritSpec: a sandbox restored from another's checkpoint gets that
// sandbox's rlimits and host pids guard (runsc validates the rlimits at
// restore), whatever its own Resources say.
func TestInheritSpec(t *testing.T) {
	dir := t.TempDir()
	parent := buildSpec(runtime.Spec{ID: "p", AgentPath: "/a"}, "/r", effectiveLimits(runtime.Resources{PIDs: 256, OpenFiles: 65536}, 0), "/airlock/p")
	if err := writeBundle(dir, parent); err != nil {
		t.Fatal(err)
	}
	child := buildSpec(runtime.Spec{ID: "c", AgentPath: "/a"}, "/r2", effectiveLimits(runtime.Resources{}, 0), "/airlock/c")
	inheritSpec(dir, child)
	if !reflect.DeepEqual(child.Process.Rlimits, parent.Process.Rlimits) || *child.Linux.Resources.Pids.Limit != *parent.Linux.Resources.Pids.Limit {
		t.Fatalf("child rlimits %v pids %d, want %v %d", child.Process.Rlimits, *child.Linux.Resources.Pids.Limit,
			parent.Process.Rlimits, *parent.Linux.Resources.Pids.Limit)
	}
	// No bundle at the source (an old snapshot): the child's own limits stay.
	own := buildSpec(runtime.Spec{ID: "c", AgentPath: "/a"}, "/r2", effectiveLimits(runtime.Resources{}, 0), "/airlock/c")
	inheritSpec(t.TempDir(), own)
	if own.Process.Rlimits[0].Hard != DefaultOpenFiles {
		t.Fatalf("rlimits changed without a source bundle: %v", own.Process.Rlimits)
	}
}
