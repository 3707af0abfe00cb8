package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// artifactImages keeps a cluster node's paused sandboxes and named
// snapshots in the --artifacts store (sandbox.Images): a directory is packed
// as a tree (trees/sha256/<hex>, content-addressed) and named by a small
// manifest under its key (paused/<id>, snapshots/<id>).
type artifactImages struct{ st *artifacts.Store }

var _ sandbox.Images = artifactImages{}

// imageManifest is the object under an image's key.
type imageManifest struct {
	Version     int              `json:"version"`
	Tree        artifacts.Digest `json:"tree"`
	PackedBytes int64            `json:"packedBytes"`
}

func (a artifactImages) Put(ctx context.Context, key, dir string) error {
	info, err := a.st.PutDir(ctx, dir)
	if err != nil {
		return fmt.Errorf("uploading %s: %w", key, err)
	}
	b, _ := json.Marshal(imageManifest{Version: 1, Tree: info.Digest, PackedBytes: info.Size})
	if _, err := a.st.Put(ctx, key, bytes.NewReader(b), int64(len(b)), artifacts.DigestOf(b)); err != nil {
		return fmt.Errorf("uploading %s: manifest: %w", key, err)
	}
	return nil
}

func (a artifactImages) manifest(ctx context.Context, key string) (imageManifest, error) {
	var man imageManifest
	p, err := a.st.Get(ctx, key)
	if err != nil {
		return man, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return man, err
	}
	if err := json.Unmarshal(b, &man); err != nil {
		return man, fmt.Errorf("manifest %s: %w", key, err)
	}
	if man.Version != 1 {
		return man, fmt.Errorf("manifest %s: version %d is not known here", key, man.Version)
	}
	return man, man.Tree.Validate()
}

// Get fetches the tree key names (hash-checked into the store's cache) and
// moves it to dst: an image is used once, so no copy stays in the cache.
func (a artifactImages) Get(ctx context.Context, key, dst string) error {
	man, err := a.manifest(ctx, key)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	if _, err := a.st.GetDir(ctx, artifacts.TreeKey(man.Tree)); err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	if err := a.st.MoveDir(man.Tree, dst); err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	return nil
}

// Delete removes the manifest and the tree it names (a paused image or a
// snapshot is the only user of its tree: memory images do not repeat).
func (a artifactImages) Delete(ctx context.Context, key string) error {
	man, err := a.manifest(ctx, key)
	if errors.Is(err, artifacts.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := a.st.Delete(ctx, key); err != nil {
		return err
	}
	return a.st.Delete(ctx, artifacts.TreeKey(man.Tree))
}

func (a artifactImages) Unavailable(err error) bool { return errors.Is(err, artifacts.ErrUnavailable) }
