package gateway

import (
	"net/http"
	"regexp"
	"slices"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/cluster/placement"
)

// Parts of a node admission's refusal (internal/daemon, node.go): "node n1
// is full: 8 of 8 CPUs held, the sandbox needs 2", "… 900 of 1024 MiB
// memory held, …", "node n1 is full: 64 sandboxes".
var (
	fullCPUs   = regexp.MustCompile(`(\d+) of (\d+) CPUs held`)
	fullMemory = regexp.MustCompile(`(\d+) of (\d+) MiB memory held`)
	fullCount  = regexp.MustCompile(`is full: \d+ sandboxes`)
)

// refusedFree is what a node that refused a create as full has free: the
// placer's count, corrected by what the node's own refusal says (it counts
// creates that other api instances placed since its last heartbeat).
func refusedFree(s placement.NodeStatus, msg string) placement.Resources {
	f := s.Free()
	num := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	if m := fullCPUs.FindStringSubmatch(msg); m != nil {
		f.CPUCount = int(max(num(m[2])-num(m[1]), 0))
	}
	if m := fullMemory.FindStringSubmatch(msg); m != nil {
		f.MemoryMB = max(num(m[2])-num(m[1]), 0)
	}
	if fullCount.MatchString(msg) {
		f = placement.Resources{}
	}
	return f
}

// clusterFull answers a create that every node it tried refused as full
// (full: node → its refusal) and that placement has no other node for:
// 503, saying that the cluster is full and what the largest free slot on
// any live node is, rather than passing one node's "node n2 is full" on.
func (g *Gateway) clusterFull(w http.ResponseWriter, r *http.Request, req placement.Request, full map[string]string) {
	refused := make([]string, 0, len(full))
	for id := range full {
		refused = append(refused, id)
	}
	slices.Sort(refused)
	id, slot := placement.LargestSlot(g.placer.Status(), func(s placement.NodeStatus) placement.Resources {
		if msg, ok := full[s.ID]; ok {
			return refusedFree(s, msg)
		}
		return s.Free()
	})
	req.Exclude = nil
	err := &placement.FullError{Request: req, Refused: refused, Largest: slot, LargestNode: id}
	g.log.Info("create: the cluster is full", "refused", refused, "largest_node", id, "largest_cpus", slot.CPUCount, "largest_memory_mb", slot.MemoryMB)
	writeError(w, r, http.StatusServiceUnavailable, err.Error())
}
