package sandbox_test

import "github.com/airlock-sandbox/airlock/internal/sandbox/sandboxtest"

// The fake runtimes live in sandboxtest (shared with internal/cluster/node's
// move tests); these are their names here.
type (
	ckRuntime    = sandboxtest.CkRuntime
	cloneRuntime = sandboxtest.CloneRuntime
	snapRuntime  = sandboxtest.SnapRuntime
)
