package placement

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNoCapacity is matched (errors.Is) by every *RefusedError: no live
	// node can take the request now. The API answers 503 with the error's
	// message.
	ErrNoCapacity = errors.New("no capacity")
	// ErrInvalidRequest is a request placement cannot even try (no CPU, no
	// memory, negative disk): a caller's bug or a 400.
	ErrInvalidRequest = errors.New("invalid placement request")
	// ErrInvalidNode is a heartbeat the placer refuses to record.
	ErrInvalidNode = errors.New("invalid node")
	// ErrUnknownNode names a node the placer does not know.
	ErrUnknownNode = errors.New("unknown node")
)

// RefusedError says why no node could take a request: how many nodes were
// set aside for each reason, and the most any live, matching node had free.
// Its message is written for the API's 503 body.
type RefusedError struct {
	Request Request

	Nodes    int // nodes known to the placer, in any state
	Draining int
	Lost     int
	Excluded int // live nodes the request excluded (Request.Exclude)

	// Among live nodes: those of another runtime kind, and those lacking at
	// least one required label (MissingLabel counts per label).
	WrongRuntime  int
	MissingLabels int
	MissingLabel  map[string]int
	// MissingTemplate counts live nodes of the right runtime with every
	// label that lack a required template (Request.TemplateRequired).
	MissingTemplate int

	// Among live nodes of the right runtime with every label (the matching
	// nodes): how many lacked each resource. One node can lack several.
	Matching    int
	ShortCPU    int
	ShortMemory int
	ShortDisk   int
	AtMaxCount  int // at their MaxSandboxes

	// MostFree is the largest free amount of each resource on any matching
	// node (each resource on its own, so no single node may have all of it).
	MostFree Resources
	// Largest is the largest free slot on one matching node (the most free
	// CPUs, then memory; NodeStatus.Free), and LargestNode that node.
	Largest     Resources
	LargestNode string
}

// Is makes errors.Is(err, ErrNoCapacity) true.
func (e *RefusedError) Is(target error) bool { return target == ErrNoCapacity }

// Short names what was short, most specific first: "label", "runtime",
// "template", "memory", "cpu", "disk", "sandboxes", or "nodes" when no node
// is live.
func (e *RefusedError) Short() []string {
	var s []string
	if e.Matching == 0 {
		if e.MissingLabels > 0 {
			s = append(s, "label")
		}
		if e.WrongRuntime > 0 {
			s = append(s, "runtime")
		}
		if e.MissingTemplate > 0 {
			s = append(s, "template")
		}
		if len(s) == 0 {
			s = append(s, "nodes")
		}
		return s
	}
	if e.ShortMemory > 0 {
		s = append(s, "memory")
	}
	if e.ShortCPU > 0 {
		s = append(s, "cpu")
	}
	if e.ShortDisk > 0 {
		s = append(s, "disk")
	}
	if e.AtMaxCount > 0 {
		s = append(s, "sandboxes")
	}
	return s
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	live := e.Nodes - e.Draining - e.Lost - e.Excluded
	if live > 0 && e.Matching == live {
		// Every live node could run it and none has room.
		b.WriteString("the cluster is full: ")
	}
	b.WriteString("no node can take the sandbox (")
	b.WriteString(e.Request.describe())
	b.WriteString("): ")
	if live == 0 {
		switch {
		case e.Nodes == 0:
			b.WriteString("no nodes are registered")
		case e.Excluded > 0:
			fmt.Fprintf(&b, "no live node (%d draining, %d lost, %d excluded)", e.Draining, e.Lost, e.Excluded)
		default:
			fmt.Fprintf(&b, "no live node (%d draining, %d lost)", e.Draining, e.Lost)
		}
		return b.String()
	}
	var parts []string
	if e.WrongRuntime > 0 {
		parts = append(parts, fmt.Sprintf("%d run another runtime than %s", e.WrongRuntime, e.Request.Runtime))
	}
	if e.MissingLabels > 0 {
		var ls []string
		for _, l := range e.Request.Labels {
			if c := e.MissingLabel[l]; c > 0 {
				ls = append(ls, fmt.Sprintf("%s (%d)", l, c))
			}
		}
		parts = append(parts, fmt.Sprintf("%d lack a required label: %s", e.MissingLabels, strings.Join(ls, ", ")))
	}
	if e.MissingTemplate > 0 {
		parts = append(parts, fmt.Sprintf("%d do not hold the template %s", e.MissingTemplate, e.Request.Template))
	}
	if e.Matching == 0 && len(parts) > 0 {
		fmt.Fprintf(&b, "of %d live nodes, %s; none matches", live, strings.Join(parts, "; "))
		e.writeOthers(&b)
		return b.String()
	}
	if e.ShortMemory > 0 {
		parts = append(parts, fmt.Sprintf("memory is short on %d (most free: %d MiB)", e.ShortMemory, e.MostFree.MemoryMB))
	}
	if e.ShortCPU > 0 {
		parts = append(parts, fmt.Sprintf("CPU is short on %d (most free: %d)", e.ShortCPU, e.MostFree.CPUCount))
	}
	if e.ShortDisk > 0 {
		parts = append(parts, fmt.Sprintf("disk is short on %d (most free: %d MiB)", e.ShortDisk, e.MostFree.DiskMB))
	}
	if e.AtMaxCount > 0 {
		parts = append(parts, fmt.Sprintf("%d are at their sandbox limit", e.AtMaxCount))
	}
	fmt.Fprintf(&b, "of %d live nodes, %s", live, strings.Join(parts, "; "))
	e.writeOthers(&b)
	if e.LargestNode != "" {
		fmt.Fprintf(&b, "; the largest free slot on any node is %d CPUs and %d MiB memory (on %s)", e.Largest.CPUCount, e.Largest.MemoryMB, e.LargestNode)
	}
	return b.String()
}

func (e *RefusedError) writeOthers(b *strings.Builder) {
	switch {
	case e.Excluded > 0:
		fmt.Fprintf(b, " (and %d draining, %d lost, %d excluded)", e.Draining, e.Lost, e.Excluded)
	case e.Draining > 0 || e.Lost > 0:
		fmt.Fprintf(b, " (and %d draining, %d lost)", e.Draining, e.Lost)
	}
}
