package placement

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestFullErrorNamesTheClusterAndTheLargestSlot(t *testing.T) {
	st := func(id string, state State, capCPU, resCPU int, capMem, resMem int64) NodeStatus {
		return NodeStatus{Node: Node{ID: id, State: state, Capacity: Resources{CPUCount: capCPU, MemoryMB: capMem}, Reserved: Resources{CPUCount: resCPU, MemoryMB: resMem}}}
	}
	nodes := []NodeStatus{
		st("n1", Live, 8, 8, 4096, 2048),  // 0 CPUs, 2048 MiB
		st("n2", Live, 8, 7, 4096, 3584),  // 1 CPU, 512 MiB
		st("n3", Live, 8, 7, 4096, 3072),  // 1 CPU, 1024 MiB: the largest
		st("n4", Draining, 8, 0, 4096, 0), // not live: not counted
	}
	id, slot := LargestSlot(nodes, NodeStatus.Free)
	if id != "n3" || slot.CPUCount != 1 || slot.MemoryMB != 1024 {
		t.Fatalf("LargestSlot = %s %+v, want n3 with 1 CPU and 1024 MiB", id, slot)
	}
	err := error(&FullError{Request: Request{Resources: Resources{CPUCount: 2, MemoryMB: 512}}, Refused: []string{"n1", "n2", "n3"}, Largest: slot, LargestNode: id})
	if !errors.Is(err, ErrNoCapacity) {
		t.Errorf("a FullError is not ErrNoCapacity")
	}
	for _, want := range []string{"the cluster is full", "2 CPUs, 512 MiB memory", "n1, n2, n3 refused it as full", "the largest free slot on any node is 1 CPUs and 1024 MiB memory (on n3)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "node n2 is full") {
		t.Errorf("message %q names one node as full", err)
	}
	atMax := st("n5", Live, 8, 0, 4096, 0)
	atMax.MaxSandboxes, atMax.Sandboxes = 3, 3
	if f := atMax.Free(); f != (Resources{}) {
		t.Errorf("a node at its sandbox limit has %+v free, want nothing", f)
	}
	if msg := (&FullError{Request: Request{Resources: Resources{CPUCount: 2, MemoryMB: 512}}, LargestNode: "n1"}).Error(); !strings.Contains(msg, "no node has any CPU or memory free") {
		t.Errorf("message without any free slot: %q", msg)
	}
}

// A placer whose every live node could run a request and has no room says
// the cluster is full, with the largest free slot on one node; one where
// some node cannot run it (a label) does not.
func TestRefusedFullCluster(t *testing.T) {
	p := New(Config{})
	for _, n := range []Node{
		{ID: "a", Gen: 1, State: Live, Capacity: Resources{CPUCount: 8, MemoryMB: 4096}, Reserved: Resources{CPUCount: 7, MemoryMB: 1024}},
		{ID: "b", Gen: 1, State: Live, Capacity: Resources{CPUCount: 8, MemoryMB: 4096}, Reserved: Resources{CPUCount: 7, MemoryMB: 512}},
		{ID: "c", Gen: 1, State: Live, Capacity: Resources{CPUCount: 8, MemoryMB: 4096}, Reserved: Resources{CPUCount: 8}},
	} {
		if err := p.Update(n); err != nil {
			t.Fatal(err)
		}
	}
	_, err := p.Place(Request{Resources: Resources{CPUCount: 2, MemoryMB: 512}})
	msg := fmt.Sprint(err)
	if !errors.Is(err, ErrNoCapacity) || !strings.HasPrefix(msg, "the cluster is full: no node can take the sandbox (2 CPUs, 512 MiB memory): of 3 live nodes, CPU is short on 3") ||
		!strings.HasSuffix(msg, "; the largest free slot on any node is 1 CPUs and 3584 MiB memory (on b)") {
		t.Errorf("full cluster: %q", msg)
	}
	_, err = p.Place(Request{Resources: Resources{CPUCount: 2, MemoryMB: 512}, Labels: []string{"kvm"}})
	if msg := fmt.Sprint(err); strings.Contains(msg, "the cluster is full") {
		t.Errorf("no node with the label: %q says the cluster is full", msg)
	}
}
