package daemon

import (
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/cluster/node"
)

// A cluster node keeps its paused sandboxes and named snapshots in the
// --artifacts store through artifacts.Images (node.Hooks).
var _ node.Images = artifacts.Images{}
