package placement

import (
	"fmt"
	"sort"
	"strings"
)

// FullError says that the cluster is full: every live node that could run
// a request refused it as full (its own admission, counting creates other
// api instances placed since its last heartbeat), or had no room by the
// placer's count. Its message names the largest free slot any node has, so
// that a caller knows what would still fit. errors.Is(err, ErrNoCapacity)
// holds.
type FullError struct {
	Request Request
	// Refused are the nodes that refused the request as full.
	Refused []string
	// Largest is the largest free slot on one live node (Slot), and
	// LargestNode that node ("" when no node is live).
	Largest     Resources
	LargestNode string
}

// Is makes errors.Is(err, ErrNoCapacity) true.
func (e *FullError) Is(target error) bool { return target == ErrNoCapacity }

func (e *FullError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the cluster is full: no node has room for the sandbox (%s)", e.Request.describe())
	if len(e.Refused) > 0 {
		fmt.Fprintf(&b, "; %s refused it as full", strings.Join(e.Refused, ", "))
	}
	switch {
	case e.LargestNode == "":
		b.WriteString("; no node is live")
	case e.Largest.CPUCount <= 0 && e.Largest.MemoryMB <= 0:
		b.WriteString("; no node has any CPU or memory free")
	default:
		fmt.Fprintf(&b, "; the largest free slot on any node is %d CPUs and %d MiB memory (on %s)", e.Largest.CPUCount, e.Largest.MemoryMB, e.LargestNode)
	}
	return b.String()
}

// Free is what a node has left for new sandboxes by the placer's count:
// its capacity less what its sandboxes and this placer's creates hold,
// never below zero. A node at its MaxSandboxes has nothing free.
func (s NodeStatus) Free() Resources {
	f := s.Capacity.Sub(s.Committed())
	if s.MaxSandboxes > 0 && s.Sandboxes+s.InFlightCreates+s.ConfirmedCreates >= s.MaxSandboxes {
		f = Resources{}
	}
	return Resources{CPUCount: max(f.CPUCount, 0), MemoryMB: max(f.MemoryMB, 0), DiskMB: max(f.DiskMB, 0)}
}

// LargestSlot returns the live node with the largest free slot and that
// slot: the most free CPUs, then the most free memory (ties: the lowest
// id). free gives each node's free resources (NodeStatus.Free, or a
// caller's better knowledge of a node that refused a request).
func LargestSlot(nodes []NodeStatus, free func(NodeStatus) Resources) (string, Resources) {
	nodes = append([]NodeStatus(nil), nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	var (
		best    string
		largest Resources
	)
	for _, n := range nodes {
		if n.State != Live {
			continue
		}
		f := free(n)
		if best == "" || f.CPUCount > largest.CPUCount || (f.CPUCount == largest.CPUCount && f.MemoryMB > largest.MemoryMB) {
			best, largest = n.ID, f
		}
	}
	return best, largest
}
