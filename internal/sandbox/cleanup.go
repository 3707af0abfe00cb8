package sandbox

import (
	"context"
	"time"
)

// undoTimeout bounds a cleanup: it runs on a context detached from the
// request (a cancelled create must still give back what it took).
const undoTimeout = 30 * time.Second

// undo is a cleanup stack: the steps that give back what a sandbox took so
// far (slot, network, runtime directory, store row), run newest first when
// its creation fails or it is given up.
type undo []func(ctx context.Context)

// push adds a step.
func (u *undo) push(step func(ctx context.Context)) { *u = append(*u, step) }

// run runs the steps newest first, once, on a context detached from ctx and
// bounded by undoTimeout.
func (u *undo) run(ctx context.Context) {
	steps := *u
	*u = nil
	if len(steps) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	for i := len(steps) - 1; i >= 0; i-- {
		steps[i](cctx)
	}
}
