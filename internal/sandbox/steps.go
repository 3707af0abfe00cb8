package sandbox

import (
	"context"
	"log/slog"
	"time"
)

// Forward steps: a create, a pause and a resume are each an ordered list of
// named steps (as firecracker-go-sdk's handler lists), run by steps.run.
// Each step's time goes to the debug log (one line per step: sandbox, op,
// kind, step, elapsed) and, for a step that succeeded, to the Observer when
// it is a StepObserver (the daemon's /metrics histogram
// airlock_sandbox_step_seconds{op,kind,step}). The names are stable: doc.go
// lists them per op and kind. Where a forward step takes what a cleanup
// step (cleanup.go) gives back, it has that step's name (network); the
// cleanup stacks themselves are unchanged.

// Operations (label "op").
const (
	opCreate   = "create"
	opPause    = "pause"
	opResume   = "resume"
	opPoolFill = "pool"     // a warm-pool sandbox restored ahead of its create (pool.go)
	opFork     = "fork"     // the parent's checkpoint of a fork
	opSnapshot = "snapshot" // the source's checkpoint of a named snapshot
	opKill     = "kill"     // a kill: what it answers after, and its background teardown (teardown.go)
)

// Kinds (label "kind").
const (
	kindCold     = "cold"     // create: boot the template
	kindRestore  = "restore"  // create: restore the template's boot snapshot
	kindPool     = "pool"     // create: claim a warm-pool sandbox
	kindSnapshot = "snapshot" // create: restore a named snapshot
	kindFork     = "fork"     // create: a fork child
	kindMemory   = "memory"   // pause/resume with the memory image
	kindImported = "imported" // resume from an image another node made (move.go)
	kindFill     = "fill"     // pool: one sandbox filled
	kindParent   = "parent"   // fork/snapshot: the source's checkpoint
	kindAnswer   = "answer"   // kill: the steps before it answers
	kindTeardown = "teardown" // kill: the background teardown
)

// Forward step names (label "step"); stepNetwork (cleanup.go) is shared.
const (
	stepClaim      = "claim"      // take a warm-pool sandbox (or wait for one being filled)
	stepClone      = "clone"      // copy the saved writable layer into the new directory
	stepStart      = "start"      // boot the template in the runtime
	stepRestore    = "restore"    // the runtime restores the memory image
	stepWake       = "wake"       // SIGUSR1: the restored agent listens again
	stepWait       = "wait"       // the agent answers /health
	stepInit       = "init"       // /init (identity, env vars, clock), and a cold boot's start command
	stepRegister   = "register"   // the store row, the index and the timer
	stepSpace      = "space"      // the host's disk has room for the memory image (reads the sandbox's memory use)
	stepClear      = "clear"      // remove an old checkpoint image
	stepFreeze     = "freeze"     // the guest's /freeze (connections cut, file systems synced)
	stepCheckpoint = "checkpoint" // the runtime writes the memory image
	stepReaddress  = "readdress"  // the guest address back into its namespace
	stepCommit     = "commit"     // the store row says the new state

	// A kill's steps (teardown.go). kill/answer: index, journal, stop, cut,
	// row (only when the row goes before the answer; it runs beside stop
	// and cut), log; total is the whole kill inside the daemon.
	// kill/teardown: exit, runtime, network, row.
	stepIndex   = "index"   // out of the index (404 from here on)
	stepJournal = "journal" // the teardown journal's entry
	stepStop    = "stop"    // SIGKILL sent to every process (runtime.Stopper.Stop)
	stepCut     = "cut"     // the network cut (network.Manager.Cut)
	stepRow     = "row"     // the store row deleted
	stepLog     = "log"     // the "sandbox killed" record (lifecycle events)
	stepTotal   = "total"   // the whole kill, index to answer
	stepExit    = "exit"    // the processes have exited (runtime.Stopper.WaitStopped)
	// kill/teardown also has stepRuntime and stepNetwork (cleanup.go).
)

// StepObserver is an Observer that is also told each forward step's time
// (only steps that succeeded). Calls are synchronous and must return
// quickly.
type StepObserver interface {
	Step(op, kind, step string, elapsed time.Duration)
}

// step is one named forward step.
type step struct {
	name string
	do   func(ctx context.Context) error
}

// steps runs and times the forward steps of one operation on one sandbox.
// A nil *steps runs them untimed.
type steps struct {
	op, kind string
	id       string // the sandbox; a step that allocates it sets it
	log      *slog.Logger
	observe  func(op, kind, step string, elapsed time.Duration) // nil: log only
}

// newSteps returns the runner for op/kind on sandbox id ("" until a step
// allocates it).
func (m *Manager) newSteps(op, kind, id string) *steps {
	r := &steps{op: op, kind: kind, id: id, log: m.log}
	if so, ok := m.cfg.Observer.(StepObserver); ok {
		r.observe = so.Step
	}
	return r
}

// run runs list in order. The first step that fails stops it: undo (when
// not nil) runs, and the step's error is returned as it is.
func (r *steps) run(ctx context.Context, undo func(context.Context), list ...step) error {
	for _, s := range list {
		begin := time.Now()
		err := s.do(ctx)
		r.done(s.name, time.Since(begin), err)
		if err != nil {
			if undo != nil {
				undo(ctx)
			}
			return err
		}
	}
	return nil
}

// done records one step's time.
func (r *steps) done(name string, elapsed time.Duration, err error) {
	if r == nil {
		return
	}
	if err != nil {
		r.log.Debug("step failed", "sandbox", r.id, "op", r.op, "kind", r.kind, "step", name, "elapsed", elapsed, "err", err)
		return
	}
	r.log.Debug("step", "sandbox", r.id, "op", r.op, "kind", r.kind, "step", name, "elapsed", elapsed)
	if r.observe != nil {
		r.observe(r.op, r.kind, name, elapsed)
	}
}

// stepOf is step{name, do}, for a function whose own variables shadow the
// step type's name.
func stepOf(name string, do func(ctx context.Context) error) step { return step{name: name, do: do} }
