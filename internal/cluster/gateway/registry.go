package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

// registry is the gateway's view of the nodes table, read every
// cluster.HeartbeatInterval/2 (and on demand for an unknown node id).
type registry struct {
	mu     sync.RWMutex
	nodes  map[string]cluster.Node
	synced time.Time // of the last successful read
	tried  time.Time // of the last read, successful or not
}

// effectiveState is a node's state as routing sees it: lost when its
// heartbeat is older than cluster.LostAfter even before the reaper marks it.
func effectiveState(n cluster.Node) string {
	if n.State == cluster.StateLost || n.Age > cluster.LostAfter {
		return cluster.StateLost
	}
	return n.State
}

// node returns a node of the last read.
func (g *Gateway) node(id string) (cluster.Node, bool) {
	g.reg.mu.RLock()
	defer g.reg.mu.RUnlock()
	n, ok := g.reg.nodes[id]
	return n, ok
}

// lookupNode is node, reading the nodes table once more when id is not
// known yet (a node that registered since the last read).
func (g *Gateway) lookupNode(ctx context.Context, id string) (cluster.Node, bool) {
	if n, ok := g.node(id); ok {
		return n, true
	}
	g.refreshMu.Lock()
	if time.Since(g.triedAt()) >= 100*time.Millisecond {
		if err := g.refresh(ctx); err != nil {
			g.log.Warn("reading the nodes", "err", err)
		}
	}
	g.refreshMu.Unlock()
	return g.node(id)
}

func (g *Gateway) triedAt() time.Time {
	g.reg.mu.RLock()
	defer g.reg.mu.RUnlock()
	return g.reg.tried
}

func (g *Gateway) syncedAt() time.Time {
	g.reg.mu.RLock()
	defer g.reg.mu.RUnlock()
	return g.reg.synced
}

// nodesIn returns the known nodes in the given effective states, by id.
func (g *Gateway) nodesIn(states ...string) []cluster.Node {
	g.reg.mu.RLock()
	var out []cluster.Node
	for _, n := range g.reg.nodes {
		if slices.Contains(states, effectiveState(n)) {
			out = append(out, n)
		}
	}
	g.reg.mu.RUnlock()
	slices.SortFunc(out, func(a, b cluster.Node) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ensureSynced reads the nodes table when it was never read (a request
// that came before Run's first read), at most once a second.
func (g *Gateway) ensureSynced(ctx context.Context) {
	if !g.syncedAt().IsZero() {
		return
	}
	g.refreshMu.Lock()
	defer g.refreshMu.Unlock()
	if g.syncedAt().IsZero() && time.Since(g.triedAt()) >= time.Second {
		if err := g.refresh(ctx); err != nil {
			g.log.Warn("reading the nodes", "err", err)
		}
	}
}

// refresh reads the nodes table and feeds the placer.
func (g *Gateway) refresh(ctx context.Context) error {
	g.readMu.Lock()
	defer g.readMu.Unlock()
	return g.refreshLocked(ctx)
}

// refreshSince reads the nodes again unless a read that started after t
// succeeded already (a burst of creates refused for a template shares one
// read, and a read that started before a node's heartbeat is never taken
// for one that saw it).
func (g *Gateway) refreshSince(ctx context.Context, t time.Time) error {
	g.readMu.Lock()
	defer g.readMu.Unlock()
	if g.lastReadStart.After(t) {
		return nil
	}
	return g.refreshLocked(ctx)
}

func (g *Gateway) refreshLocked(ctx context.Context) error {
	start := time.Now()
	rows, err := g.store.Nodes(ctx)
	g.reg.mu.Lock()
	g.reg.tried = time.Now()
	g.reg.mu.Unlock()
	if err != nil {
		return err
	}
	seen := make(map[string]cluster.Node, len(rows))
	g.reg.mu.RLock()
	prev := g.reg.nodes
	g.reg.mu.RUnlock()
	for _, n := range rows {
		seen[n.ID] = n
		if old, ok := prev[n.ID]; ok && !old.StartedAt.Equal(n.StartedAt) {
			// The node restarted: what placement counted there (creates in
			// flight, confirmed ones, its generation) is void.
			g.placer.Remove(n.ID)
		}
		if err := g.placer.Update(toPlacement(n)); err != nil {
			g.log.Warn("node heartbeat refused by placement", "node", n.ID, "err", err)
			continue
		}
		st := placement.Live
		switch effectiveState(n) {
		case cluster.StateLost:
			st = placement.Lost
		case cluster.StateDraining:
			st = placement.Draining
		}
		_ = g.placer.SetState(n.ID, st)
	}
	g.reg.mu.Lock()
	for id := range g.reg.nodes {
		if _, ok := seen[id]; !ok {
			g.placer.Remove(id)
		}
	}
	g.reg.nodes = seen
	g.reg.synced = time.Now()
	g.reg.mu.Unlock()
	g.lastReadStart = start
	return nil
}

// toPlacement converts a node row to what the placer reads.
func toPlacement(n cluster.Node) placement.Node {
	return placement.Node{
		ID:           n.ID,
		Gen:          max(n.Gen, 1),
		Runtime:      n.Runtime,
		Labels:       n.Labels,
		Capacity:     placement.Resources{CPUCount: n.CPUs, MemoryMB: int64(n.MemoryMB), DiskMB: int64(n.DiskMB)},
		MaxSandboxes: n.MaxSandboxes,
		Reserved:     placement.Resources{CPUCount: n.ReservedCPUs, MemoryMB: int64(n.ReservedMemoryMB)},
		Sandboxes:    n.Sandboxes,
		Templates:    n.Templates,
		WarmPool:     n.WarmPool,
	}
}

// runRegistry reads the nodes table every cluster.HeartbeatInterval/2.
func (g *Gateway) runRegistry(ctx context.Context) {
	tick := time.NewTicker(cluster.HeartbeatInterval / 2)
	defer tick.Stop()
	failing := false
	for {
		if err := g.refresh(ctx); err != nil {
			if !failing && ctx.Err() == nil {
				g.log.Error("reading the nodes table", "err", err)
			}
			failing = true
		} else if failing {
			g.log.Info("reading the nodes table again")
			failing = false
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// runReaper marks the nodes whose heartbeat stopped as lost, every
// cluster.ReapInterval (one api instance at a time: the store's lock).
func (g *Gateway) runReaper(ctx context.Context) {
	tick := time.NewTicker(cluster.ReapInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		lost, err := g.store.ReapLostNodes(ctx, cluster.LostAfter)
		if err != nil {
			if ctx.Err() == nil {
				g.log.Error("reaping lost nodes", "err", err)
			}
			continue
		}
		for _, n := range lost {
			g.log.Warn("node lost", "node", n.ID, "addr", n.Addr, "heartbeatAge", n.Age.Round(time.Millisecond), "sandboxes", n.Sandboxes)
			_ = g.placer.SetState(n.ID, placement.Lost)
		}
	}
}
