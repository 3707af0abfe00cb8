package node

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// AdoptAndResume adopts the paused sandbox id from node from into mgr and
// resumes it here with timeout. admit (the node's admission, Node.Admit;
// nil: none) is asked before the claim, with the claim's other checks, so
// a node too full to run it refuses it while it is still from's, and the
// api tier tries another node.
//
// The chain: serveAdopt → AdoptAndResume → Adopt (moves.go) →
// sandbox.Manager.ClaimAdopted (sandbox/move.go: the claim,
// NodeHooks.Claim) → sandbox.Live.ResumeImported (sandbox/move.go:
// the fetch, NodeHooks.FetchPaused, and the restore of the memory image,
// sandbox/create_restore.go).
func AdoptAndResume(ctx context.Context, mgr *sandbox.Manager, rows Rows, admit func(sandbox.Limits) (func(), error),
	id, from string, timeout time.Duration) (*sandbox.Sandbox, error) {
	var release func()
	defer func() {
		if release != nil {
			release()
		}
	}()
	check := func(rec *store.Sandbox) error {
		if admit == nil || rec.State != sandbox.StatePaused {
			return nil
		}
		var err error
		release, err = admit(sandbox.Limits{CPUCount: rec.CPUCount, MemoryMB: rec.MemoryMB})
		return err
	}
	sb, err := Adopt(ctx, mgr, rows, id, from, check)
	if err != nil || sb.State != sandbox.StatePaused {
		return sb, err
	}
	e, err := mgr.Lookup(id)
	if err != nil {
		return nil, err
	}
	if release != nil {
		ctx = sandbox.WithAdmitted(ctx)
	}
	sb, err = e.ResumeImported(ctx, timeout)
	if errors.Is(err, sandbox.ErrNotImported) { // it was this node's already, with its files
		return e.Resume(ctx, timeout)
	}
	return sb, err
}

// runDropMoved runs DropMoved (moves.go) every interval until ctx ends:
// paused sandboxes another node adopted are dropped here.
func (n *Node) runDropMoved(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			DropMoved(ctx, n.mgr, n.cfg.Store, n.log)
		}
	}
}
