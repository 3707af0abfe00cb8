package airlock

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// NodeInfo is one node of a cluster as the api tier sees it
// (GET /airlock/v1/nodes).
type NodeInfo struct {
	ID      string   `json:"id"`
	Addr    string   `json:"addr"`
	State   string   `json:"state"` // live, draining or lost
	Runtime string   `json:"runtime"`
	Version string   `json:"version,omitempty"`
	Labels  []string `json:"labels"`
	// Capacity the node states, and what its sandboxes hold.
	CPUs             int `json:"cpus"`
	MemoryMB         int `json:"memoryMB"`
	DiskMB           int `json:"diskMB"`
	MaxSandboxes     int `json:"maxSandboxes"`
	ReservedCPUs     int `json:"reservedCpus"`
	ReservedMemoryMB int `json:"reservedMemoryMB"`
	Sandboxes        int `json:"sandboxes"`
	// Templates on the node's disk, and ready warm-pool sandboxes.
	Templates      []string       `json:"templates"`
	WarmPool       map[string]int `json:"warmPool"`
	HeartbeatAgeMs int64          `json:"heartbeatAgeMs"`
	StartedAt      time.Time      `json:"startedAt"`
	LostAt         time.Time      `json:"lostAt,omitzero"`
	// Placement is what the answering api instance counts on the node
	// beyond its last heartbeat: creates in flight, and creates confirmed
	// that no heartbeat counts yet.
	Placement *NodePlacement `json:"placement,omitempty"`
}

// NodePlacement is an api instance's own count on a node (NodeInfo).
type NodePlacement struct {
	InFlightCPUs      int   `json:"inFlightCpus"`
	InFlightMemoryMB  int64 `json:"inFlightMemoryMB"`
	InFlightCreates   int   `json:"inFlightCreates"`
	ConfirmedCPUs     int   `json:"confirmedCpus"`
	ConfirmedMemoryMB int64 `json:"confirmedMemoryMB"`
	ConfirmedCreates  int   `json:"confirmedCreates"`
}

// ListNodes lists the nodes of a cluster (an api tier; a single host
// answers 404).
func (c *Client) ListNodes(ctx context.Context) ([]NodeInfo, error) {
	var out []NodeInfo
	if _, err := c.doJSON(ctx, http.MethodGet, "/airlock/v1/nodes", nil, nil, &out); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return out, nil
}

// DrainNode drains a node (drain true: no more placement there, and its
// sandboxes move to other nodes when the cluster has an artifact store;
// Drain says what moved) or lets placement use it again (false).
func (c *Client) DrainNode(ctx context.Context, id string, drain bool) error {
	if drain {
		_, err := c.Drain(ctx, id, true)
		return err
	}
	if _, err := c.doJSON(ctx, http.MethodPost, "/airlock/v1/nodes/"+url.PathEscape(id)+"/undrain", nil, struct{}{}, nil); err != nil {
		return fmt.Errorf("undrain node %s: %w", id, err)
	}
	return nil
}

// SandboxMove is one sandbox a drain handled: the node it is on now and
// its state there, or why it could not move.
type SandboxMove struct {
	SandboxID string `json:"sandboxId"`
	Node      string `json:"node,omitempty"`
	State     string `json:"state,omitempty"`
	// Was is its state before the drain: "running" or "paused".
	Was    string `json:"was,omitempty"`
	LeftMs int64  `json:"leftMs,omitempty"`
	Error  string `json:"error,omitempty"`
}

// NodeDrain is the answer to a drain.
type NodeDrain struct {
	ID     string        `json:"id"`
	State  string        `json:"state"`
	Moved  []SandboxMove `json:"moved"`
	Failed []SandboxMove `json:"failed"`
}

// Drain stops placement on node id and, with move (a cluster with an
// artifact store), moves its sandboxes to other nodes: running ones are
// paused into the store and resumed elsewhere, paused ones handed over. It
// returns once every sandbox was handled.
func (c *Client) Drain(ctx context.Context, id string, move bool) (*NodeDrain, error) {
	path := "/airlock/v1/nodes/" + url.PathEscape(id) + "/drain"
	if !move {
		path += "?move=false"
	}
	var out NodeDrain
	if _, err := c.doJSON(ctx, http.MethodPost, path, nil, nil, &out); err != nil {
		return nil, fmt.Errorf("drain node %s: %w", id, err)
	}
	return &out, nil
}
