package runtime_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/gvisor"
	"github.com/airlock-sandbox/airlock/internal/runtime/microvm"
)

// TestCapsStateEveryAbility checks that each runtime's Caps names exactly
// the optional interfaces it implements: one left out would silently turn
// pause, fork or snapshots off.
func TestCapsStateEveryAbility(t *testing.T) {
	t.Parallel()
	for _, rt := range []runtime.Runtime{&gvisor.Runtime{}, &microvm.Runtime{}} {
		c := rt.Caps()
		check := func(name string, implements, stated bool) {
			if implements != stated {
				t.Errorf("%s: implements %s = %v, but Caps states %v", rt.Name(), name, implements, stated)
			}
		}
		_, ok := rt.(runtime.Checkpointer)
		check("Checkpointer", ok, c.Checkpointer != nil)
		_, ok = rt.(runtime.Cloner)
		check("Cloner", ok, c.Cloner != nil)
		_, ok = rt.(runtime.LayerSaver)
		check("LayerSaver", ok, c.LayerSaver != nil)
		_, ok = rt.(runtime.StateLister)
		check("StateLister", ok, c.StateLister != nil)
		_, ok = rt.(runtime.AgentLogger)
		check("AgentLogger", ok, c.AgentLogger != nil)
		_, ok = rt.(runtime.Rebooter)
		check("Rebooter", ok, c.Rebooter != nil)
		_, ok = rt.(runtime.StopReasoner)
		check("StopReasoner", ok, c.StopReasoner != nil)
		_, ok = rt.(runtime.ImageBuilder)
		check("ImageBuilder", ok, c.ImageBuilder != nil)
		_, ok = rt.(runtime.CheckpointWatcher)
		check("CheckpointWatcher", ok, c.CheckpointWatcher != nil)
		_, ok = rt.(runtime.Stopper)
		check("Stopper", ok, c.Stopper != nil)
	}
}
