package daemon

import (
	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A cluster node keeps its paused sandboxes and named snapshots in the
// --artifacts store through artifacts.Images.
var _ sandbox.Images = artifacts.Images{}
