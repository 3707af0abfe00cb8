package daemon

import (
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/cluster/node"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// newNode makes a --role node daemon's side of the cluster
// (internal/cluster/node) from its flags; the node gets the sandbox
// manager once it exists (node.Attach in newManager).
func (d *daemon) newNode(st store.Store) *node.Node {
	memoryMB := d.cfg.NodeMemoryMB
	if memoryMB <= 0 {
		memoryMB = nodeMemoryMB()
	}
	return node.New(node.Config{
		ID: d.role.nodeID, Advertise: d.role.advertise, Labels: d.nodeLabels(),
		Secret: d.role.secret, TLS: d.role.tls,
		CPUs: d.cfg.NodeCPUs, MemoryMB: memoryMB, MaxSandboxes: 1 << (32 - d.subnet.Bits() - 2),
		DataDir: d.dataDir, Store: st, Movable: d.artifacts != nil,
		EachBeat: d.refreshBlocked,
		Arriving: func(id string) { d.activity.Arriving(id) }, // d.activity is set later; nil: no feed
		Log:      d.log,
	})
}

// nodeMemoryMB is the memory a node lets sandboxes hold: the host's, less
// the warm pool's reserve (1 GiB and a tenth).
func nodeMemoryMB() int {
	total, reserve := hostMemory(), poolMemoryReserve()
	if total <= reserve {
		return 0
	}
	return int((total - reserve) >> 20)
}

// trusted is, on a node, the check of a request the api tier authenticated
// (api.Options.Trusted, node.Trusted). nil on a single host: every request
// needs the key.
func (d *daemon) trusted() func(*http.Request) bool {
	if !d.role.node {
		return nil
	}
	return node.Trusted
}
