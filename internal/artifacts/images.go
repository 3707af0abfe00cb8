package artifacts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
	"golang.org/x/sys/unix"
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
//
// Version 1 names one tree holding the whole directory. Version 2 (written
// when the directory holds large files, see splitFiles) names the tree of
// the rest and, in Files, each large file stored as a blob of its
// own (blobs/sha256/<hex>, the file's bytes as they are): a paused
// sandbox's memory image (gVisor's pages.img, 100+ MB for an interpreter)
// is then neither compressed on the pause nor decoded and copied on the
// resume. Its bytes are hashed while they download into a temporary file,
// which is renamed into place only once its digest matched; the blobs and
// the tree download in parallel. Get and GetShared read both versions.
type imageManifest struct {
	Version     int         `json:"version"`
	Tree        Digest      `json:"tree"`
	PackedBytes int64       `json:"packedBytes"`
	Files       []imageFile `json:"files,omitempty"`
}

// imageFile is a file of a version 2 image, kept out of its tree.
type imageFile struct {
	Name  string      `json:"name"` // a slash path relative to the image; its parent is in the tree
	Blob  Digest      `json:"blob"`
	Size  int64       `json:"size"`
	Mode  fs.FileMode `json:"mode"` // permission bits only
	MTime int64       `json:"mtimeNs"`
}

// splitMin is the size from which a top-level file of an image is stored
// as a blob of its own rather than in its tree.
var splitMin int64 = 1 << 20

// maxImageFiles bounds the files a manifest may name.
const maxImageFiles = 16

// maxImageManifest bounds what Delete reads of an unverified manifest.
const maxImageManifest = 64 << 10

// splitFiles lists the files of dir stored as blobs: regular, mostly
// dense (at least half of it allocated: a sparse one, a sandbox's
// disk.img, is smaller packed in the tree with its holes; a blob keeps
// none), at least splitMin bytes, no extended attributes, and no other
// path in dir to the same inode (hard links inside the tree stay the
// tree's; links from outside, a paused sandbox's memory image linked from
// its sandbox directory, do not matter); at most maxImageFiles of them,
// largest first. Names are slash-separated paths relative to dir.
func splitFiles(dir string) ([]imageFile, error) {
	type cand struct {
		f  imageFile
		id [2]uint64
	}
	var cands []cand
	seen := map[[2]uint64]int{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		id := [2]uint64{uint64(st.Dev), st.Ino}
		seen[id]++
		if fi.Size() < splitMin || st.Blocks*512*2 < fi.Size() {
			return nil
		}
		if n, err := unix.Llistxattr(p, nil); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return err
		} else if n > 0 {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		cands = append(cands, cand{imageFile{Name: filepath.ToSlash(rel), Size: fi.Size(), Mode: fi.Mode().Perm(), MTime: fi.ModTime().UnixNano()}, id})
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []imageFile
	for _, c := range cands {
		if seen[c.id] == 1 {
			out = append(out, c.f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Size > out[j].Size })
	if len(out) > maxImageFiles {
		out = out[:maxImageFiles]
	}
	return out, nil
}

// Put stores dir under key (replacing what was there) and returns the
// digest of the manifest written there: what Get and GetShared check.
// Large top-level files are stored as blobs (version 2, see
// imageManifest); a directory without any is a version 1 image, which
// every reader reads.
func (a Images) Put(ctx context.Context, key, dir string) (string, error) {
	files, err := splitFiles(dir)
	if err != nil {
		return "", fmt.Errorf("uploading %s: %w", key, err)
	}
	skip := map[string]bool{}
	for _, f := range files {
		skip[f.Name] = true
	}
	var (
		wg   sync.WaitGroup
		info Info
		errs = make([]error, len(files)+1)
	)
	wg.Go(func() { info, errs[0] = a.St.PutDirSkip(ctx, dir, skip) })
	for i := range files {
		wg.Go(func() {
			fi, err := a.St.PutFile(ctx, filepath.Join(dir, files[i].Name))
			files[i].Blob, errs[i+1] = fi.Digest, err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("uploading %s: %w", key, err)
	}
	man := imageManifest{Version: 1, Tree: info.Digest, PackedBytes: info.Size}
	if len(files) > 0 {
		man.Version, man.Files = 2, files
	}
	b, _ := json.Marshal(man)
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
	switch {
	case man.Version == 1 && len(man.Files) == 0:
	case man.Version == 2 && len(man.Files) > 0 && len(man.Files) <= maxImageFiles:
	default:
		return man, fmt.Errorf("manifest %s: version %d with %d files is not known here", key, man.Version, len(man.Files))
	}
	if err := man.Tree.Validate(); err != nil {
		return man, fmt.Errorf("manifest %s: %w", key, err)
	}
	seen := map[string]bool{}
	for _, f := range man.Files {
		if f.Name == "" || path.Clean(f.Name) != f.Name || path.IsAbs(f.Name) || f.Name == ".." || strings.HasPrefix(f.Name, "../") ||
			strings.ContainsAny(f.Name, "\\\x00") || seen[f.Name] {
			return man, fmt.Errorf("manifest %s: file name %q: not a clean, unique relative path", key, f.Name)
		}
		seen[f.Name] = true
		if err := f.Blob.Validate(); err != nil {
			return man, fmt.Errorf("manifest %s: file %s: %w", key, f.Name, err)
		}
		if f.Size < 0 || f.Mode&^fs.ModePerm != 0 {
			return man, fmt.Errorf("manifest %s: file %s: bad size %d or mode %v", key, f.Name, f.Size, f.Mode)
		}
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

// fetchParts fetches the tree the manifest names into the cache (GetDir)
// and, beside it, each file's blob: with shared, into the cache too (Get);
// else downloaded into a temporary file of the cache, hashed on the way,
// removed unless it matched. It returns the files' paths, and fails with
// nothing of the files left when any part failed.
func (a Images) fetchParts(ctx context.Context, key string, man imageManifest, shared bool) ([]string, error) {
	start := time.Now()
	// A failed part stops the blobs' downloads, not the tree's: a tree
	// fetch left behind could land in the cache after this returned; it is
	// dropped here once done.
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	paths := make([]string, len(man.Files))
	errs := make([]error, len(man.Files)+1)
	var treeTook, filesTook time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, errs[0] = a.St.GetDir(ctx, TreeKey(man.Tree)); errs[0] != nil {
			cancel()
		}
		treeTook = time.Since(start)
	})
	var mu sync.Mutex
	for i, f := range man.Files {
		wg.Go(func() {
			var err error
			if shared {
				paths[i], err = a.St.Get(bctx, BlobKey(f.Blob)) // drops a corrupted blob itself
			} else if paths[i], err = a.St.download(bctx, BlobKey(f.Blob), f.Blob, "blob"); err != nil {
				err = a.St.dropCorrupt(ctx, BlobKey(f.Blob), err)
			}
			if err != nil {
				errs[i+1] = fmt.Errorf("file %s: %w", f.Name, err)
				cancel()
			}
			mu.Lock()
			filesTook = max(filesTook, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if !shared {
			// An image is used once: nothing of it stays in the cache.
			for _, p := range paths {
				if p != "" {
					os.Remove(p)
				}
			}
			if errs[0] == nil {
				a.St.dropTree(man.Tree)
			}
		}
		return nil, err
	}
	a.St.log.Info("artifacts: image fetched", "key", key, "files", len(man.Files), "tree_took", treeTook, "files_took", filesTook, "elapsed", time.Since(start))
	return paths, nil
}

// Get fetches the tree the manifest under key names (both verified: the
// manifest against digest, the tree against the manifest, before it is
// unpacked) and moves it to dst: an image is used once, so no copy stays in
// the cache. A version 2 image's files are downloaded beside the tree,
// each verified before it is renamed into dst (see imageManifest).
func (a Images) Get(ctx context.Context, key, digest, dst string) error {
	man, err := a.manifest(ctx, key, digest)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	paths, err := a.fetchParts(ctx, key, man, false)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	if err := a.St.MoveDir(man.Tree, dst); err != nil {
		removePaths(paths)
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	for i, f := range man.Files {
		if err := placeFile(paths[i], dst, f); err != nil {
			removePaths(paths[i:])
			_ = removeAll(dst)
			return fmt.Errorf("fetching %s: file %s: %w", key, f.Name, err)
		}
	}
	if len(man.Files) > 0 {
		syncDir(dst)
	}
	return nil
}

// realParents checks that each parent of the relative slash path name
// under dst is a directory, not a symlink.
func realParents(dst, name string) error {
	p := dst
	parts := strings.Split(name, "/")
	for _, c := range parts[:len(parts)-1] {
		p = filepath.Join(p, c)
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s: its parent %s is not in the image's tree: %w", name, c, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s: its parent %s is not a directory", name, c)
		}
	}
	return nil
}

func removePaths(ps []string) {
	for _, p := range ps {
		os.Remove(p)
	}
}

// placeFile gives the verified download tmp f's mode and time and renames
// it to f.Name under dst: every parent must be a directory of the tree
// (never a symlink), and the name must not exist there yet.
func placeFile(tmp, dst string, f imageFile) error {
	if err := realParents(dst, f.Name); err != nil {
		return err
	}
	p := filepath.Join(dst, filepath.FromSlash(f.Name))
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%s is in the image's tree too", f.Name)
	}
	if err := os.Chmod(tmp, f.Mode); err != nil {
		return err
	}
	t := time.Unix(0, f.MTime)
	if err := os.Chtimes(tmp, t, t); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// GetShared fetches the tree key names, verified as Get does, into the
// store's cache (once; it stays there) and links its files into dst:
// snapshots serve many creates. A version 2 image's files are cached
// blobs (read-only), linked in as well.
func (a Images) GetShared(ctx context.Context, key, digest, dst string) error {
	man, err := a.manifest(ctx, key, digest)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	paths, err := a.fetchParts(ctx, key, man, true)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	src := filepath.Join(a.St.cache, "trees", man.Tree.Hex())
	if err := linkTree(ctx, src, dst); err != nil {
		return fmt.Errorf("fetching %s: %w", key, err)
	}
	for i, f := range man.Files {
		err := realParents(dst, f.Name)
		if err == nil {
			err = linkTree(ctx, paths[i], filepath.Join(dst, filepath.FromSlash(f.Name)))
		}
		if err != nil {
			_ = removeAll(dst)
			return fmt.Errorf("fetching %s: file %s: %w", key, f.Name, err)
		}
	}
	return nil
}

// linkTree hard-links src (a directory or a file) to dst (the cache and
// dst are both in the data dir); a copy when they are on different file
// systems.
func linkTree(ctx context.Context, src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s exists", dst)
	}
	if out, err := helperenv.Command(ctx, "cp", "-al", src, dst).CombinedOutput(); err != nil {
		_ = os.RemoveAll(dst)
		if out2, err2 := helperenv.Command(ctx, "cp", "-a", "--reflink=auto", src, dst).CombinedOutput(); err2 != nil {
			return fmt.Errorf("linking %s: %v: %s; copying it: %w: %s", src, err, bytes.TrimSpace(out), err2, bytes.TrimSpace(out2))
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

// Delete removes the manifest and the tree and blobs it names (a paused
// image or a snapshot is the only user of them: memory images do not
// repeat). The
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
	var errs []error
	for _, f := range man.Files {
		errs = append(errs, a.St.Delete(ctx, BlobKey(f.Blob)))
	}
	return errors.Join(append(errs, a.St.Delete(ctx, TreeKey(man.Tree)))...)
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
