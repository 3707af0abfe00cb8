package placement

import (
	"fmt"
	"testing"
)

// With TemplateRequired and a template on every node, placement still
// draws at random (best of K) instead of scanning for the least loaded
// node: independent placers spread their creates.
func TestTemplateRequiredStillSamples(t *testing.T) {
	picked := map[string]bool{}
	for seed := uint64(1); seed <= 10; seed++ {
		p := New(Config{Seed: seed})
		for i := 0; i < 200; i++ {
			if err := p.Update(Node{ID: fmt.Sprintf("n%03d", i), Gen: 1, Runtime: "gvisor", Templates: []string{"base"},
				Capacity: Resources{CPUCount: 64, MemoryMB: 65536}, MaxSandboxes: 100}); err != nil {
				t.Fatal(err)
			}
		}
		r, err := p.Place(Request{Template: "base", TemplateRequired: true, Resources: Resources{CPUCount: 2, MemoryMB: 512}})
		if err != nil {
			t.Fatal(err)
		}
		picked[r.NodeID()] = true
	}
	if len(picked) < 5 {
		t.Errorf("10 independent placers picked %d distinct nodes of 200 (%v): not sampling", len(picked), picked)
	}
}
