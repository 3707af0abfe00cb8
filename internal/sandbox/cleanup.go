package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// undoTimeout bounds a cleanup: it runs on a context detached from the
// request (a cancelled create must still give back what it took).
const undoTimeout = 30 * time.Second

// undo is a cleanup stack: named steps that give back what a sandbox took,
// pushed as it takes each thing and run newest first when its creation
// fails, it is given up or it is removed.
//
// A step may name earlier steps it runs after: when one of those failed, it
// is skipped, so that what it gives back stays for a retry. That is how a
// failed cleanup is retried at the next start: the slot is freed only once
// the network is gone, and the store row — the record Restore retries from
// — is deleted only once the runtime instance and the network are.
type undo struct{ steps []undoStep }

type undoStep struct {
	name  string
	after []string // skipped when one of these failed
	do    func(ctx context.Context) error
}

// Step names, in the order a sandbox takes what they give back.
const (
	stepObservers = "observers" // observers and event logs told it is gone
	stepRecord    = "record"    // the store row
	stepSlot      = "slot"      // the network slot
	stepNetwork   = "network"   // network namespace, veth, firewall
	stepRuntime   = "runtime"   // the runtime instance and its directory (rootfs, disk)
)

// push adds a step that runs after the steps named in after (see undo).
func (u *undo) push(name string, do func(ctx context.Context) error, after ...string) {
	u.steps = append(u.steps, undoStep{name: name, after: after, do: do})
}

// run runs the steps newest first, once, on a context detached from ctx and
// bounded by undoTimeout, and returns their errors.
func (u *undo) run(ctx context.Context) error {
	if len(u.steps) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	return u.runOn(cctx)
}

// runOn runs the steps newest first, once, on ctx.
func (u *undo) runOn(ctx context.Context) error {
	steps := u.steps
	u.steps = nil
	failed := map[string]bool{}
	var errs []error
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if slices.ContainsFunc(s.after, func(n string) bool { return failed[n] }) {
			continue
		}
		if err := s.do(ctx); err != nil {
			failed[s.name] = true
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// giveBack pushes the steps that give back what sandbox id (its slot and
// runtime directory) holds, each when the sandbox takes it.
type giveBack struct {
	m    *Manager
	id   string
	slot int // -1: unknown (not freed, and the network finds the namespace by id)
	dir  string
	// image is the key of the sandbox's image in the artifact store
	// (move.go), removed once its row is deleted ("" none). A row that is
	// not this node's any more (moved) is not deleted, and its image stays.
	image string
}

// record pushes the last steps: deleting the store row once the runtime
// instance and the network are gone, then telling the observers.
func (g giveBack) record(u *undo) {
	u.push(stepObservers, func(context.Context) error {
		g.m.observer().Removed(g.id)
		return nil
	})
	u.push(stepRecord, func(ctx context.Context) error {
		err := g.m.cfg.Store.DeleteSandbox(ctx, g.id)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("deleting sandbox row: %w", err)
		}
		if err == nil && g.image != "" {
			g.m.dropImage(g.image)
		}
		return nil
	}, stepRuntime, stepNetwork)
}

// slotStep pushes freeing the network slot, once the network is gone.
func (g giveBack) slotStep(u *undo) {
	u.push(stepSlot, func(context.Context) error {
		if g.slot < 0 {
			return nil
		}
		m := g.m
		m.mu.Lock()
		if m.slots[g.slot] == g.id {
			delete(m.slots, g.slot)
		}
		m.mu.Unlock()
		return nil
	}, stepNetwork)
}

// network pushes the network's teardown.
func (g giveBack) network(u *undo) {
	u.push(stepNetwork, func(ctx context.Context) error {
		if err := g.m.cfg.Network.Teardown(ctx, g.id, g.slot); err != nil {
			return fmt.Errorf("tearing down network: %w", err)
		}
		return nil
	})
}

// runtime pushes destroying the runtime instance (processes, mounts, the
// root filesystem and disk in its directory).
func (g giveBack) runtime(u *undo) {
	u.push(stepRuntime, func(ctx context.Context) error {
		if err := g.m.cfg.Runtime.Destroy(ctx, g.id, g.dir); err != nil {
			return fmt.Errorf("destroying runtime sandbox: %w", err)
		}
		return nil
	})
}

// push puts the whole stack of a sandbox onto u: the runtime instance's
// step goes on with the network's before either is set up, so a failed
// create destroys both whichever step failed (Destroy of a sandbox that
// never started is a no-op).
func (g giveBack) push(u *undo) {
	g.record(u)
	g.slotStep(u)
	g.network(u)
	g.runtime(u)
}

// release destroys the runtime sandbox, tears the network down and deletes
// the store row (the whole cleanup stack, on ctx). The slot is freed only
// when the network is gone, and the row only when everything else is, so a
// failed release is retried by Restore.
func (m *Manager) release(ctx context.Context, id string, slot int, dir string) error {
	return m.releaseImage(ctx, id, slot, dir, "")
}

// releaseImage is release for a sandbox whose image is in the artifact
// store under image (removed with the row).
func (m *Manager) releaseImage(ctx context.Context, id string, slot int, dir, image string) error {
	var u undo
	giveBack{m: m, id: id, slot: slot, dir: dir, image: image}.push(&u)
	return u.runOn(ctx)
}
