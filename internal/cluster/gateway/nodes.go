package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cluster"
	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
	"github.com/airlock-sandbox/airlock/sdk/go/airlock"
)

// A node in GET /airlock/v1/nodes is the SDK's wire type, airlock.NodeInfo.

func toNodeJSON(n cluster.Node) airlock.NodeInfo {
	j := airlock.NodeInfo{ID: n.ID, Addr: n.Addr, State: effectiveState(n), Runtime: n.Runtime, Version: n.Version,
		Labels: n.Labels, CPUs: n.CPUs, MemoryMB: n.MemoryMB, DiskMB: n.DiskMB, MaxSandboxes: n.MaxSandboxes,
		ReservedCPUs: n.ReservedCPUs, ReservedMemoryMB: n.ReservedMemoryMB, Sandboxes: n.Sandboxes,
		Templates: n.Templates, WarmPool: n.WarmPool, HeartbeatAgeMs: n.Age.Milliseconds(), StartedAt: n.StartedAt, LostAt: n.LostAt}
	if j.Labels == nil {
		j.Labels = []string{}
	}
	if j.Templates == nil {
		j.Templates = []string{}
	}
	if j.WarmPool == nil {
		j.WarmPool = map[string]int{}
	}
	return j
}

// storeTimeout bounds the store reads of the gateway's own answers.
const storeTimeout = 5 * time.Second

func (g *Gateway) readNodes(ctx context.Context) ([]cluster.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	nodes, err := g.store.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(nodes, func(a, b cluster.Node) int { return strings.Compare(a.ID, b.ID) })
	return nodes, nil
}

// health answers GET /health: the api instance and the nodes it sees by
// state; 503 when the store cannot be read.
func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	nodes, err := g.readNodes(r.Context())
	if err != nil {
		writeJSON(w, r, http.StatusServiceUnavailable, map[string]any{"status": "error", "role": cluster.RoleAPI,
			"message": fmt.Sprintf("the cluster store cannot be read: %v", err)})
		return
	}
	counts := map[string]int{cluster.StateLive: 0, cluster.StateDraining: 0, cluster.StateLost: 0}
	for _, n := range nodes {
		counts[effectiveState(n)]++
	}
	writeJSON(w, r, http.StatusOK, map[string]any{"status": "ok", "role": cluster.RoleAPI, "nodes": counts})
}

// listNodes answers GET /airlock/v1/nodes from the store.
func (g *Gateway) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := g.readNodes(r.Context())
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		return
	}
	out := make([]airlock.NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		j := toNodeJSON(n)
		// What this api instance counts on the node beyond its heartbeat.
		if st, ok := g.placer.NodeStatus(n.ID); ok {
			j.Placement = &airlock.NodePlacement{InFlightCPUs: st.InFlight.CPUCount, InFlightMemoryMB: st.InFlight.MemoryMB,
				InFlightCreates: st.InFlightCreates, ConfirmedCPUs: st.Confirmed.CPUCount,
				ConfirmedMemoryMB: st.Confirmed.MemoryMB, ConfirmedCreates: st.ConfirmedCreates}
		}
		out = append(out, j)
	}
	writeJSON(w, r, http.StatusOK, out)
}

// setNodeState answers POST /airlock/v1/nodes/{id}/drain and /undrain: the
// store's state, and this instance's placer at once (the others follow at
// their next read of the nodes).
func (g *Gateway) setNodeState(w http.ResponseWriter, r *http.Request, id string, drain bool) {
	state, pstate := cluster.StateLive, placement.Live
	if drain {
		state, pstate = cluster.StateDraining, placement.Draining
	}
	ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
	defer cancel()
	// A lost node's state is the reaper's and the node's own: it reconciles
	// (kills what was reported lost) and goes live when it comes back, which
	// a drain written over "lost" would skip (found in review).
	if nodes, err := g.readNodes(ctx); err == nil {
		for _, n := range nodes {
			if n.ID == id && effectiveState(n) == cluster.StateLost {
				writeError(w, r, http.StatusConflict, fmt.Sprintf("node %s is lost (no heartbeat for %s): it becomes live again once it is back and has reconciled", id, n.Age.Round(time.Second)))
				return
			}
		}
	}
	err := g.store.SetNodeState(ctx, id, state)
	if errors.Is(err, cluster.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, fmt.Sprintf("node %q not found", id))
		return
	}
	if err != nil {
		writeError(w, r, http.StatusServiceUnavailable, storeError(err).msg)
		return
	}
	_ = g.placer.SetState(id, pstate)
	g.reg.mu.Lock()
	if n, ok := g.reg.nodes[id]; ok {
		n.State = state
		g.reg.nodes[id] = n
	}
	g.reg.mu.Unlock()
	g.log.Info("node state set", "node", id, "state", state)
	if !drain || r.URL.Query().Get("move") == "false" {
		writeJSON(w, r, http.StatusOK, cluster.DrainResponse{ID: id, State: state, Moved: []cluster.SandboxMoved{}, Failed: []cluster.SandboxMoved{}})
		return
	}
	writeJSON(w, r, http.StatusOK, g.drain(r.Context(), id))
}
