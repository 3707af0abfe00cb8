package sandbox

import (
	"context"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// NodeHooks is the one seam between the single-host core and the cluster
// node role (internal/cluster/node implements it): the artifact store every
// node can fetch from, and the claims in the shared store that keep a
// sandbox on one node at a time. It is nil on a single host (Config.Node),
// and the core calls it only at the points where a node differs:
//
//   - after a pause's checkpoint: the paused image (and the agent build it
//     runs) is stored (StoreAgent, StorePaused; Reachable first, so that a
//     user's pause with the store down is refused before anything is done);
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
	// StorePaused stores the image directory dir of paused sandbox id
	// under a new key (one per pause: removing an earlier pause's image
	// never removes a later one) and returns the key and the digest the
	// row records.
	StorePaused(ctx context.Context, id, dir string) (key, digest string, err error)
	// FetchPaused fetches the paused image key, which must have digest,
	// into the new directory dst (the caller's: used once).
	FetchPaused(ctx context.Context, key, digest, dst string) error
	// DropPaused removes the paused image key from the store.
	DropPaused(ctx context.Context, key string) error
	// StoreAgent stores the agent binary at path (by content: once per
	// build) and returns its reference.
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
