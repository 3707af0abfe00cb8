package placement

import (
	"fmt"
	"slices"
)

// State is a node's place in its lifecycle, as the cluster's membership sees it.
type State int

const (
	// Live nodes heartbeat and take new sandboxes.
	Live State = iota
	// Draining nodes keep running what they have but take nothing new
	// (`airlock node drain`, SIGTERM on a node). Set by the api side
	// (Placer.SetState), it holds until SetState(id, Live), whatever the
	// node's heartbeats say; a node's own heartbeat may say it too.
	Draining
	// Lost nodes stopped heartbeating; nothing is placed on them until
	// SetState(id, Live) (the membership layer calls it when heartbeats
	// resume).
	Lost
)

func (s State) String() string {
	switch s {
	case Live:
		return "live"
	case Draining:
		return "draining"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// Resources is an amount of each resource placement accounts for. Memory and
// disk are in MiB (the repository's MemoryMB convention).
type Resources struct {
	CPUCount int
	MemoryMB int64
	DiskMB   int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{CPUCount: r.CPUCount + o.CPUCount, MemoryMB: r.MemoryMB + o.MemoryMB, DiskMB: r.DiskMB + o.DiskMB}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{CPUCount: r.CPUCount - o.CPUCount, MemoryMB: r.MemoryMB - o.MemoryMB, DiskMB: r.DiskMB - o.DiskMB}
}

// Node is what a node states about itself in a heartbeat: its limits, what its
// sandboxes hold, and what it can start fast. The placer treats Capacity as
// hard limits: a node that over-commits its hardware (CPUs, say) states the
// over-committed figure itself.
type Node struct {
	ID string
	// Gen is the heartbeat's generation: the node bumps it for every
	// heartbeat it samples (from 1), and answers each create with the
	// generation of the first heartbeat whose Reserved counts the new
	// sandbox (the current one + 1); the api side passes that to
	// Reservation.Confirm. The placer ignores a heartbeat older than one it
	// has seen (delivered out of order), and a confirmed create stops
	// counting on its own only once a heartbeat of its generation or later
	// arrives, so a heartbeat sampled before a create ended but delivered
	// after its Confirm does not free the create's resources.
	Gen     uint64
	State   State
	Runtime string   // isolation runtime kind: "gvisor" or "microvm"
	Labels  []string // e.g. "kvm"; a request's labels must all be here

	// Capacity is what the node lets sandboxes reserve in total. A zero
	// DiskMB means the node does not account disk; a zero MaxSandboxes, no
	// limit by count.
	Capacity     Resources
	MaxSandboxes int

	// Reserved is what the node's sandboxes hold (running, starting, paused in
	// memory, warm pool), and Sandboxes how many there are.
	Reserved  Resources
	Sandboxes int

	// Templates are the templates the node holds on disk (no pull needed), and
	// WarmPool the number of ready, unclaimed pooled sandboxes per template.
	Templates []string
	WarmPool  map[string]int
}

func (n Node) clone() Node {
	n.Labels = slices.Clone(n.Labels)
	n.Templates = slices.Clone(n.Templates)
	if n.WarmPool != nil {
		m := make(map[string]int, len(n.WarmPool))
		for k, v := range n.WarmPool {
			m[k] = v
		}
		n.WarmPool = m
	}
	return n
}

func (n Node) validate() error {
	switch {
	case n.ID == "":
		return fmt.Errorf("%w: node without an id", ErrInvalidNode)
	case n.Gen == 0:
		return fmt.Errorf("%w: node %s: heartbeat without a generation (Gen starts at 1)", ErrInvalidNode, n.ID)
	case n.State < Live || n.State > Lost:
		return fmt.Errorf("%w: node %s: unknown state %d", ErrInvalidNode, n.ID, int(n.State))
	case n.Capacity.CPUCount < 0 || n.Capacity.MemoryMB < 0 || n.Capacity.DiskMB < 0 || n.MaxSandboxes < 0:
		return fmt.Errorf("%w: node %s: negative capacity", ErrInvalidNode, n.ID)
	}
	return nil
}

// NodeStatus is a node as the placer sees it: the last heartbeat plus what
// this placer has in flight there and what it confirmed since that heartbeat.
type NodeStatus struct {
	Node
	// InFlight is held by creates placed here that have not ended.
	InFlight        Resources
	InFlightCreates int
	// Confirmed is held by creates that succeeded here and that no
	// heartbeat received so far counts (by generation, see Node.Gen).
	Confirmed        Resources
	ConfirmedCreates int
}

// Committed is everything counted against the node's capacity.
func (s NodeStatus) Committed() Resources {
	return s.Reserved.Add(s.InFlight).Add(s.Confirmed)
}
