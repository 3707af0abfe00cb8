package node

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// The node's moves (issue 25: moved here from internal/sandbox/move.go):
// adoption, evacuation, dropping paused sandboxes another node took, and
// the wait for a paused sandbox's upload. They are built on the manager's
// primitives, which run inside its per-sandbox operation locks:
// Manager.ClaimAdopted, Manager.LiveList, Live.Evacuate, Live.Drop; the
// wait for an upload is over the node's own uploads (upload.go). The
// resume of an imported image stays in internal/sandbox
// (Live.ResumeImported), where Resume calls it.

// Rows reads a node's sandbox rows in the shared store (store.Store: a
// node's handle sees only its own rows).
type Rows interface {
	GetSandbox(ctx context.Context, id string) (*store.Sandbox, error)
	ListSandboxes(ctx context.Context) ([]*store.Sandbox, error)
}

// Adopt makes the paused sandbox id, whose row is on node from, this
// node's (mgr's, whose rows are rows): the row is claimed (a 409 when it
// is not paused there any more, or this node cannot restore it) and the
// sandbox is held here as paused, its image still in the store; its
// resume fetches it. A sandbox already here is returned as it is. also,
// when given, is asked about the row before the claim, after this node's
// own checks (a node's admission: an error refuses the adoption while the
// sandbox is still from's). The chain is in doc.go.
func Adopt(ctx context.Context, mgr *sandbox.Manager, rows Rows, id, from string, also ...func(*store.Sandbox) error) (*sandbox.Sandbox, error) {
	check := func(rec *store.Sandbox) error {
		for _, f := range also {
			if err := f(rec); err != nil {
				return err
			}
		}
		return nil
	}
	if e, err := mgr.Lookup(id); err == nil {
		if row, err := rows.GetSandbox(ctx, id); err == nil {
			if err := check(row); err != nil {
				return nil, err
			}
			return e.View(), nil // already this node's
		}
		// else a stale copy (it moved away since): ClaimAdopted drops it
	}
	e, err := mgr.ClaimAdopted(ctx, id, from, check)
	if err != nil {
		return nil, err
	}
	return e.View(), nil
}

// DropMoved drops the paused sandboxes of mgr whose rows another node
// claimed (adopted after a drain, or while this node was cut off). The
// node runs it with its heartbeats (runDropMoved).
func DropMoved(ctx context.Context, mgr *sandbox.Manager, rows Rows, log *slog.Logger) {
	var candidates []*sandbox.Live
	for _, e := range mgr.LiveList() {
		if e.IdleWithImage() {
			candidates = append(candidates, e)
		}
	}
	if len(candidates) == 0 {
		return
	}
	list, err := rows.ListSandboxes(ctx) // this node's
	if err != nil {
		log.Warn("listing this node's sandboxes for moved ones", "err", err)
		return
	}
	mine := make(map[string]bool, len(list))
	for _, r := range list {
		mine[r.ID] = true
	}
	for _, e := range candidates {
		if !mine[e.ID()] {
			e.Drop(ctx)
		}
	}
}

// DropIfMoved drops sandbox id from mgr when it is paused with an image
// and its row is no longer this node's (the api tier says so right after
// a move; DropMoved finds the others).
func DropIfMoved(ctx context.Context, mgr *sandbox.Manager, rows Rows, id string) {
	e, err := mgr.Lookup(id)
	if err != nil || !e.IdleWithImage() {
		return
	}
	if _, err := rows.GetSandbox(ctx, id); errors.Is(err, store.ErrNotFound) {
		e.Drop(ctx)
	}
}

// AwaitUpload waits (bounded by ctx) until the paused sandbox id's image
// is in the artifact store, and says whether it is: nil when it is (or the
// sandbox is not paused here any more: the caller reads the row again), a
// 503 user error when the attempt in flight failed, a 404 when it is not
// here. The api tier asks before it moves a paused sandbox of a draining
// node.
func AwaitUpload(ctx context.Context, mgr *sandbox.Manager, id string) error {
	e, err := mgr.Lookup(id)
	if err != nil {
		return err
	}
	h, ok := mgr.Node().(*hooks)
	if !ok { // no artifact store: nothing is uploaded
		return nil
	}
	return h.awaitUploaded(ctx, e)
}

// Evacuee is one sandbox Evacuate handled.
type Evacuee struct {
	ID    string
	State string // "paused" once its image is in the store
	// Was is the state before: "running" (paused by Evacuate) or "paused".
	Was string
	// Left is what was left of its timeout when it was paused.
	Left time.Duration
	Err  error
}

// evacuateAtOnce is how many sandboxes Evacuate pauses at a time: a pause
// is CPU work (the checkpoint, the packing) and network (the upload).
const evacuateAtOnce = 2

// Evacuate pauses every running sandbox of mgr into the artifact store,
// marked evacuated (the next request for it resumes it, wherever it
// lands), and uploads the paused ones whose image is not there yet
// (sandbox.Live.Evacuate). A node that drains or stops runs it; the api
// tier then hands them to other nodes. Without an artifact store every
// sandbox is returned with an error that says so (it cannot move).
func Evacuate(ctx context.Context, mgr *sandbox.Manager) []Evacuee {
	var (
		out []Evacuee
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, evacuateAtOnce)
	)
	for _, e := range mgr.LiveList() {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ev := Evacuee{ID: e.ID()}
			ev.Was, ev.State, ev.Left, ev.Err = e.Evacuate(ctx)
			mu.Lock()
			out = append(out, ev)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.SortFunc(out, func(a, b Evacuee) int { return strings.Compare(a.ID, b.ID) })
	return out
}
