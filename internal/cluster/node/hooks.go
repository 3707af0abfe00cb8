package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Images stores directories where every node of the cluster can fetch them
// (the daemon's artifact store: artifacts.Images).
type Images interface {
	// Put stores the directory dir under key, replacing what was there,
	// and returns its digest, which the caller records in the row that
	// names key: the key is rewritable by anyone with write access to the
	// store, the row is not.
	Put(ctx context.Context, key, dir string) (digest string, err error)
	// Get fetches what key holds into the new directory dst, which is
	// then the caller's (a paused image: used once). What is fetched must
	// have the digest Put returned; anything else fails before a byte is
	// unpacked, and dst is not created.
	Get(ctx context.Context, key, digest, dst string) error
	// GetShared is Get into a directory whose files may be shared with
	// other fetches of key (hard links): the caller only reads them (a
	// snapshot: many creates).
	GetShared(ctx context.Context, key, digest, dst string) error
	// Delete removes key and the content only it names.
	Delete(ctx context.Context, key string) error
	// PutFile stores a file by its content (not again when the store has
	// it) and returns its reference (an agent binary).
	PutFile(ctx context.Context, path string) (string, error)
	// GetFile returns the path of a local copy of the file ref names.
	GetFile(ctx context.Context, ref string) (string, error)
	// Unavailable reports whether err says the store could not be reached.
	Unavailable(err error) bool
}

// reachabler is an Images that can say cheaply whether the store answers.
type reachabler interface {
	Reachable(ctx context.Context) error
}

// hooks is sandbox.NodeHooks over an artifact store and the cluster's
// shared store, with the node's background uploads of paused images
// (upload.go).
type hooks struct {
	img Images
	mv  store.Mover
	up  uploads
}

var _ sandbox.NodeHooks = (*hooks)(nil)

// Hooks is what a cluster node gives the sandbox manager
// (sandbox.Config.Node): paused images and named snapshots in img (the
// artifact store), claims through st, which must be the cluster's shared
// store (store.Mover, PostgreSQL). nil, as on a single host, when img is
// nil or st is not shared.
func Hooks(img Images, st store.Store) sandbox.NodeHooks {
	mv, ok := st.(store.Mover)
	if img == nil || !ok {
		return nil
	}
	return &hooks{img: img, mv: mv}
}

// pausedKey is a new key for an image of sandbox id: one per pause, so
// that removing the image of an earlier pause (in the background, after
// its resume) never removes a later one.
func pausedKey(id string) (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "paused/" + id + "/" + hex.EncodeToString(b), nil
}

func snapshotKey(snapID string) string { return "snapshots/" + snapID }

func (h *hooks) Reachable(ctx context.Context) error {
	r, ok := h.img.(reachabler)
	if !ok {
		return nil
	}
	return r.Reachable(ctx)
}

// storePaused stores the image directory dir of paused sandbox id under a
// new key (pausedKey) and returns the key and the digest the row records.
func (h *hooks) storePaused(ctx context.Context, id, dir string) (string, string, error) {
	key, err := pausedKey(id)
	if err != nil {
		return "", "", fmt.Errorf("choosing the key of a paused image: %w", err)
	}
	digest, err := h.img.Put(ctx, key, dir)
	if err != nil {
		return "", "", err
	}
	return key, digest, nil
}

func (h *hooks) FetchPaused(ctx context.Context, key, digest, dst string) error {
	return h.img.Get(ctx, key, digest, dst)
}

func (h *hooks) DropPaused(ctx context.Context, key string) error { return h.img.Delete(ctx, key) }

func (h *hooks) StoreAgent(ctx context.Context, path string) (string, error) {
	return h.img.PutFile(ctx, path)
}

func (h *hooks) FetchAgent(ctx context.Context, ref string) (string, error) {
	return h.img.GetFile(ctx, ref)
}

func (h *hooks) Claim(ctx context.Context, id, from, state string, check func(*store.Sandbox) error) (*store.Sandbox, error) {
	return h.mv.ClaimSandbox(ctx, id, from, state, check)
}

func (h *hooks) StoreSnapshot(ctx context.Context, snapID, dir string) (string, error) {
	return h.img.Put(ctx, snapshotKey(snapID), dir)
}

func (h *hooks) FetchSnapshot(ctx context.Context, snapID, digest, dst string) error {
	return h.img.GetShared(ctx, snapshotKey(snapID), digest, dst)
}

func (h *hooks) DropSnapshot(ctx context.Context, snapID string) error {
	return h.img.Delete(ctx, snapshotKey(snapID))
}

func (h *hooks) FindSnapshot(ctx context.Context, ref string) (*store.Snapshot, error) {
	s, _, err := h.mv.AnySnapshot(ctx, ref)
	return s, err
}

func (h *hooks) ClearSnapshotName(ctx context.Context, name string) error {
	return h.mv.ClearSnapshotName(ctx, name)
}

func (h *hooks) Unavailable(err error) bool { return h.img.Unavailable(err) }
