package sandbox

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// NodeHooks is the one seam between the single-host core and the cluster
// node role (internal/cluster/node implements it): the artifact store every
// node can fetch from, the claims in the shared store that keep a sandbox
// on one node at a time, and the background upload of paused images. It is
// nil on a single host (Config.Node), and the core calls it only at the
// points where a node differs:
//
//   - after a pause's checkpoint: the paused image is exported to the store
//     (ExportPaused; Reachable first, so that a user's pause with the store
//     down is refused before anything is done), or, once the checkpoint is
//     durable here, the pause answers and the node uploads it in the
//     background (Paused); a restart re-queues an upload that was cut short
//     (Reattached); a resume here stops it (Resuming), a kill cancels it
//     (Gone), an evacuation waits for it (AwaitUpload), and the manager's
//     Close stops them all (Close);
//   - before a resume: the row is claimed here (Claim), and a sandbox
//     adopted from another node fetches its image (FetchPaused, FetchAgent);
//     after it: the stored image goes (DropPaused);
//   - when a named snapshot is made (StoreSnapshot), looked up
//     (FindSnapshot, ClearSnapshotName: names are the cluster's), created
//     from on another node (FetchSnapshot) or deleted (DropSnapshot).
//
// Every error a method returns may be asked about with Unavailable.
type NodeHooks interface {
	// Reachable says whether the artifact store answers now.
	Reachable(ctx context.Context) error
	// ExportPaused uploads the image of e (busy, checkpointed here: see
	// Live.WriteImage) under a new key (one per pause: removing an earlier
	// pause's image never removes a later one) and returns what the row
	// records.
	ExportPaused(ctx context.Context, e *Live) (PausedImage, error)
	// Paused is told that e was paused here, its checkpoint durable, its
	// row saying uploading: the node uploads its image in the background
	// and records it (Live.CommitUpload). An upload already running for e
	// is left alone.
	Paused(e *Live)
	// Reattached is told that e, paused, was re-attached at start with its
	// checkpoint here: when its row still says uploading, the node starts
	// the upload again.
	Reattached(e *Live)
	// Resuming is told that e resumes here: an upload in progress is
	// cancelled, and Resuming returns when it ended.
	Resuming(e *Live)
	// Gone is told that e left the index (killed, dropped): an upload in
	// progress is cancelled. It is called with the manager's and e's locks
	// held, so it must not call e.
	Gone(e *Live)
	// AwaitUpload waits until e's background upload, if any, ended (nil:
	// then e's row says whether the image is in the store), or until the
	// attempt in flight failed (its error), or ctx ended.
	AwaitUpload(ctx context.Context, e *Live) error
	// Close cancels the background uploads in progress and waits (bounded
	// by ctx) for them to end (a restart starts them again: Reattached).
	Close(ctx context.Context)
	// FetchPaused fetches the paused image key, which must have digest,
	// into the new directory dst (the caller's: used once).
	FetchPaused(ctx context.Context, key, digest, dst string) error
	// DropPaused removes the paused image key from the store.
	DropPaused(ctx context.Context, key string) error
	// StoreAgent stores the agent binary at path (by content: once per
	// build) and returns its reference (a named snapshot's).
	StoreAgent(ctx context.Context, path string) (string, error)
	// FetchAgent returns the path of a local copy of the agent binary ref.
	FetchAgent(ctx context.Context, ref string) (string, error)
	// Claim makes the paused sandbox id this node's with state, in one
	// step that succeeds only while its row is paused on node from with an
	// image (store.Mover.ClaimSandbox: of two claims one wins); check,
	// when set, is asked about the row first.
	Claim(ctx context.Context, id, from, state string, check func(*store.Sandbox) error) (*store.Sandbox, error)
	// StoreSnapshot stores the named snapshot snapID's directory and
	// returns its digest (recorded in the snapshot's spec).
	StoreSnapshot(ctx context.Context, snapID, dir string) (digest string, err error)
	// FetchSnapshot fetches snapshot snapID (digest) into the new
	// directory dst, whose files may be shared with other fetches.
	FetchSnapshot(ctx context.Context, snapID, digest, dst string) error
	// DropSnapshot removes snapshot snapID from the store.
	DropSnapshot(ctx context.Context, snapID string) error
	// FindSnapshot returns any node's snapshot by id, else the cluster's
	// newest with that name (store.ErrNotFound when none).
	FindSnapshot(ctx context.Context, ref string) (*store.Snapshot, error)
	// ClearSnapshotName removes name from every node's snapshots.
	ClearSnapshotName(ctx context.Context, name string) error
	// Unavailable reports whether err says the store could not be reached.
	Unavailable(err error) bool
}

// unavailable reports whether err, from h, says the artifact store could
// not be reached (false on a single host).
func unavailable(h NodeHooks, err error) bool { return h != nil && h.Unavailable(err) }

// reachable asks the artifact store whether it answers (nil on a single
// host), bounded to 10 s.
func reachable(ctx context.Context, h NodeHooks) error {
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return h.Reachable(ctx)
}

// Node returns the node hooks the manager was given (Config.Node; nil on a
// single host): internal/cluster/node reaches its own state through it
// (the background uploads a node's AwaitUpload waits for).
func (m *Manager) Node() NodeHooks { return m.cfg.Node }
