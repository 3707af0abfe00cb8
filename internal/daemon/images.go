package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
	"github.com/airlock-sandbox/airlock/internal/helperenv"
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

// GetShared fetches the tree key names into the store's cache (once; it
// stays there) and links its files into dst: snapshots serve many creates.
func (a artifactImages) GetShared(ctx context.Context, key, dst string) error {
	man, err := a.manifest(ctx, key)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	src, err := a.st.GetDir(ctx, artifacts.TreeKey(man.Tree))
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	// Hard links (the cache and dst are both in the data dir); a copy
	// when they are on different file systems.
	if out, err := helperenv.Command(ctx, "cp", "-al", src, dst).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dst)
		if out2, err2 := helperenv.Command(ctx, "cp", "-a", "--reflink=auto", src, dst).CombinedOutput(); err2 != nil {
			return fmt.Errorf("fetching %s: linking the tree: %v: %s; copying it: %w: %s", key, err, bytes.TrimSpace(out), err2, bytes.TrimSpace(out2))
		}
	}
	return nil
}

// PutFile stores the file by content (blobs/sha256/<hex>; not again when
// the store has it) and returns its digest.
func (a artifactImages) PutFile(ctx context.Context, path string) (string, error) {
	info, err := a.st.PutFile(ctx, path)
	if err != nil {
		return "", err
	}
	return string(info.Digest), nil
}

// GetFile returns the cached, verified copy of the blob ref names.
func (a artifactImages) GetFile(ctx context.Context, ref string) (string, error) {
	d, err := artifacts.ParseDigest(ref)
	if err != nil {
		return "", err
	}
	return a.st.Get(ctx, artifacts.BlobKey(d))
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
