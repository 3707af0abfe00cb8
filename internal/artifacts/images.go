package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// Images keeps a cluster node's paused sandboxes and named snapshots in a
// Store (node.Images, behind the node's sandbox.NodeHooks): a directory is
// packed as a tree (trees/sha256/<hex>, content-addressed) and named by a
// small manifest under its key (paused/<id>/<nonce>, snapshots/<id>). The
// key is rewritable, so Put returns the manifest's digest for the caller to record
// where it trusts it (the sandbox or snapshot row), and Get and GetShared
// verify the manifest against that digest — never against the object's
// metadata — and the tree against the digest the manifest names, before
// anything is unpacked.
type Images struct{ St *Store }

// imageManifest is the object under an image's key.
type imageManifest struct {
	Version     int    `json:"version"`
	Tree        Digest `json:"tree"`
	PackedBytes int64  `json:"packedBytes"`
}

// maxImageManifest bounds what Delete reads of an unverified manifest.
const maxImageManifest = 64 << 10

// Put stores dir under key (replacing what was there) and returns the
// digest of the manifest written there: what Get and GetShared check.
func (a Images) Put(ctx context.Context, key, dir string) (string, error) {
	info, err := a.St.PutDir(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("uploading %s: %w", key, err)
	}
	b, _ := json.Marshal(imageManifest{Version: 1, Tree: info.Digest, PackedBytes: info.Size})
	d := DigestOf(b)
	if _, err := a.St.Put(ctx, key, bytes.NewReader(b), int64(len(b)), d); err != nil {
		return "", fmt.Errorf("uploading %s: manifest: %w", key, err)
	}
	return string(d), nil
}

// parseImageManifest decodes a manifest.
func parseImageManifest(key string, b []byte) (imageManifest, error) {
	var man imageManifest
	if err := json.Unmarshal(b, &man); err != nil {
		return man, fmt.Errorf("manifest %s: %w", key, err)
	}
	if man.Version != 1 {
		return man, fmt.Errorf("manifest %s: version %d is not known here", key, man.Version)
	}
	if err := man.Tree.Validate(); err != nil {
		return man, fmt.Errorf("manifest %s: %w", key, err)
	}
	return man, nil
}

// manifest fetches the manifest under key, verified against digest (the
// one Put returned, as recorded by its caller).
func (a Images) manifest(ctx context.Context, key, digest string) (imageManifest, error) {
	want, err := ParseDigest(digest)
	if err != nil {
		return imageManifest{}, fmt.Errorf("image %s: no valid digest recorded for it (%w); it is not fetched", key, err)
	}
	p, err := a.St.GetRef(ctx, key, want)
	if err != nil {
		return imageManifest{}, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return imageManifest{}, err
	}
	return parseImageManifest(key, b)
}

// Get fetches the tree the manifest under key names (both verified: the
// manifest against digest, the tree against the manifest, before it is
// unpacked) and moves it to dst: an image is used once, so no copy stays in
// the cache.
func (a Images) Get(ctx context.Context, key, digest, dst string) error {
	man, err := a.manifest(ctx, key, digest)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	if _, err := a.St.GetDir(ctx, TreeKey(man.Tree)); err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	if err := a.St.MoveDir(man.Tree, dst); err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	return nil
}

// GetShared fetches the tree key names, verified as Get does, into the
// store's cache (once; it stays there) and links its files into dst:
// snapshots serve many creates.
func (a Images) GetShared(ctx context.Context, key, digest, dst string) error {
	man, err := a.manifest(ctx, key, digest)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	src, err := a.St.GetDir(ctx, TreeKey(man.Tree))
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
func (a Images) PutFile(ctx context.Context, path string) (string, error) {
	info, err := a.St.PutFile(ctx, path)
	if err != nil {
		return "", err
	}
	return string(info.Digest), nil
}

// GetFile returns the cached, verified copy of the blob ref names.
func (a Images) GetFile(ctx context.Context, ref string) (string, error) {
	d, err := ParseDigest(ref)
	if err != nil {
		return "", err
	}
	return a.St.Get(ctx, BlobKey(d))
}

// Delete removes the manifest and the tree it names (a paused image or a
// snapshot is the only user of its tree: memory images do not repeat). The
// manifest is read without a digest, only to name the tree to delete:
// nothing of it is unpacked or kept. A tree it fails to name is left to
// the store's collection.
func (a Images) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	rc, _, err := a.St.Backend().Open(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	b, err := io.ReadAll(io.LimitReader(rc, maxImageManifest))
	rc.Close()
	if err != nil {
		return fmt.Errorf("reading %s: %w", key, err)
	}
	if err := a.St.Delete(ctx, key); err != nil {
		return err
	}
	man, err := parseImageManifest(key, b)
	if err != nil {
		a.St.log.Warn("artifacts: deleted an image whose manifest names no tree; its tree is left to the collection", "key", key, "err", err)
		return nil
	}
	return a.St.Delete(ctx, TreeKey(man.Tree))
}

// Reachable asks the store whether it answers: one Stat of a key nothing
// writes (a missing key is an answer). A cluster node asks before a pause
// whose upload follows its answer.
func (a Images) Reachable(ctx context.Context) error {
	_, err := a.St.Stat(ctx, "paused/reachable")
	if err == nil || errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Unavailable reports whether err says the store could not be reached.
func (a Images) Unavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
