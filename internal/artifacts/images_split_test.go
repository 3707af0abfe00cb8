package artifacts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// splitImageDir makes a directory like a paused gVisor sandbox's image: a
// dense pages.img (large), a sparse disk.img, and small files.
func splitImageDir(t *testing.T) (dir string, pages []byte) {
	t.Helper()
	dir = t.TempDir()
	pages = bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	pages[12345] = 'x'
	// The memory image is linked from elsewhere (the sandbox's directory),
	// as WriteImage links it.
	outside := filepath.Join(t.TempDir(), "pages.img")
	if err := os.WriteFile(outside, pages, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "checkpoint"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "checkpoint", "pages.img")); err != nil {
		t.Fatal(err)
	}
	// A large file with two paths inside the image stays in the tree.
	twice := bytes.Repeat([]byte("twice"), 1<<18)
	if err := os.WriteFile(filepath.Join(dir, "checkpoint", "a"), twice, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "checkpoint", "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data in a sparse file"), 4<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(16 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("state"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "meta.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, pages
}

// sameImage checks dst against the directory splitImageDir made.
func sameImage(t *testing.T, dst string, pages []byte) {
	t.Helper()
	if got, err := os.ReadFile(filepath.Join(dst, "checkpoint", "pages.img")); err != nil || !bytes.Equal(got, pages) {
		t.Fatalf("pages.img: %d bytes, %v", len(got), err)
	}
	a, err1 := os.Stat(filepath.Join(dst, "checkpoint", "a"))
	b, err2 := os.Stat(filepath.Join(dst, "b"))
	if err1 != nil || err2 != nil || !os.SameFile(a, b) || a.Size() != 5<<18 {
		t.Fatalf("checkpoint/a and b: not one file of the tree (%v, %v)", err1, err2)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "disk.img")); err != nil || len(got) != 16<<20 || string(got[4<<20:4<<20+21]) != "data in a sparse file" {
		t.Fatalf("disk.img: %d bytes, %v", len(got), err)
	}
	for name, want := range map[string]string{"checkpoint.img": "state", "sub/meta.json": "{}"} {
		if got, err := os.ReadFile(filepath.Join(dst, name)); err != nil || string(got) != want {
			t.Fatalf("%s: %q, %v", name, got, err)
		}
	}
}

// manifestOf reads the manifest under key (whatever its digest).
func manifestOf(t *testing.T, b artifacts.Backend, key string) map[string]any {
	t.Helper()
	rc, _, err := b.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var m map[string]any
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestArtifactImagesSplit (issue 24): an image with a large dense file is
// a version 2 image whose file is a blob of its own (kept out of the
// tree); Get and GetShared on another node give the whole directory back
// (the file's mode kept by Get); Delete removes manifest, tree and blob.
func TestArtifactImagesSplit(t *testing.T) {
	defer artifacts.SetSplitMin(512 << 10)()
	root := t.TempDir()
	b, err := artifacts.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, pages := splitImageDir(t)
	digest, err := newImages(t, b).Put(ctx, "paused/s1/n1", src)
	if err != nil {
		t.Fatal(err)
	}
	m := manifestOf(t, b, "paused/s1/n1")
	files, _ := m["files"].([]any)
	if m["version"] != float64(2) || len(files) != 1 || files[0].(map[string]any)["name"] != "checkpoint/pages.img" {
		t.Fatalf("manifest %v: want version 2 naming checkpoint/pages.img only (disk.img is sparse, a and b are one file)", m)
	}
	blob := artifacts.BlobKey(artifacts.DigestOf(pages))
	if ok, err := newImages(t, b).St.Exists(ctx, blob); err != nil || !ok {
		t.Fatalf("blob %s: %v %v", blob, ok, err)
	}

	dst := filepath.Join(t.TempDir(), "image")
	other := newImages(t, b)
	if err := other.Get(ctx, "paused/s1/n1", digest, dst); err != nil {
		t.Fatal(err)
	}
	sameImage(t, dst, pages)
	if fi, err := os.Stat(filepath.Join(dst, "checkpoint", "pages.img")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("pages.img mode: %v %v", fi.Mode(), err)
	}
	if left := tmpLeft(t, other.St.CacheDir()); len(left) > 0 {
		t.Fatalf("left in the cache: %v", left)
	}
	for i := range 2 {
		dst := filepath.Join(t.TempDir(), "shared")
		if err := other.GetShared(ctx, "paused/s1/n1", digest, dst); err != nil {
			t.Fatalf("GetShared %d: %v", i, err)
		}
		sameImage(t, dst, pages)
	}

	if err := other.Delete(ctx, "paused/s1/n1"); err != nil {
		t.Fatal(err)
	}
	if left, err := b.List(ctx, ""); err != nil || len(left) != 0 {
		t.Fatalf("left in the store after Delete: %v %v", left, err)
	}
}

// tmpLeft lists the cache's temporary entries (downloads, unpacks).
func tmpLeft(t *testing.T, cache string) []string {
	t.Helper()
	ents, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestArtifactImagesSplitCorruptBlob (issue 24, review M4): a version 2
// image whose blob's bytes were changed in the store is refused with
// ErrDigestMismatch; dst is not created and nothing of the download stays.
func TestArtifactImagesSplitCorruptBlob(t *testing.T) {
	defer artifacts.SetSplitMin(512 << 10)()
	root := t.TempDir()
	b, err := artifacts.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, pages := splitImageDir(t)
	for _, shared := range []bool{false, true} {
		digest, err := newImages(t, b).Put(ctx, "paused/s1/n1", src)
		if err != nil {
			t.Fatal(err)
		}
		obj := filepath.Join(root, filepath.FromSlash(artifacts.BlobKey(artifacts.DigestOf(pages))))
		bad := bytes.Clone(pages)
		bad[len(bad)/2] ^= 1 // same size, same recorded digest: only the bytes tell
		if err := os.Chmod(obj, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(obj, bad, 0o600); err != nil {
			t.Fatal(err)
		}

		other := newImages(t, b)
		dst := filepath.Join(t.TempDir(), "image")
		get := other.Get
		if shared {
			get = other.GetShared
		}
		err = get(ctx, "paused/s1/n1", digest, dst)
		if !errors.Is(err, artifacts.ErrDigestMismatch) {
			t.Fatalf("shared=%v: %v, want ErrDigestMismatch", shared, err)
		}
		if _, err := os.Lstat(dst); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("shared=%v: dst exists after a refused fetch (%v)", shared, err)
		}
		// The tree's fetch, cancelled, cleans up after itself in the
		// background.
		for i := 0; len(tmpLeft(t, other.St.CacheDir())) > 0; i++ {
			if i == 100 {
				t.Fatalf("shared=%v: left in the cache: %v", shared, tmpLeft(t, other.St.CacheDir()))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !shared {
			if trees, _ := os.ReadDir(filepath.Join(other.St.CacheDir(), "trees")); len(trees) > 0 {
				t.Fatalf("the tree of a refused image stays in the cache: %v", trees)
			}
		}
		blobs, _ := os.ReadDir(filepath.Join(other.St.CacheDir(), "sha256"))
		for _, e := range blobs {
			if e.Name() == artifacts.DigestOf(pages).Hex() || e.Name() == artifacts.DigestOf(bad).Hex() {
				t.Fatalf("shared=%v: the corrupted blob is in the cache", shared)
			}
		}
		t.Logf("shared=%v: refused: %v", shared, err)
		// The corrupted blob was removed from the store (dropCorrupt),
		// so the next Put uploads it again.
		if _, err := os.Lstat(obj); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("shared=%v: the corrupted blob is still in the store (%v)", shared, err)
		}
	}
}

// TestArtifactImagesOldLayout (issue 24): a version 1 image, as every
// earlier version wrote it (one tree of the whole directory, pages.img
// inside), still comes back whole by Get and GetShared.
func TestArtifactImagesOldLayout(t *testing.T) {
	defer artifacts.SetSplitMin(512 << 10)()
	b, err := artifacts.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src, pages := splitImageDir(t)
	old := newImages(t, b)
	info, err := old.St.PutDir(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	man, _ := json.Marshal(map[string]any{"version": 1, "tree": info.Digest, "packedBytes": info.Size})
	d := artifacts.DigestOf(man)
	if _, err := old.St.Put(ctx, "paused/s1/n1", bytes.NewReader(man), int64(len(man)), d); err != nil {
		t.Fatal(err)
	}
	other := newImages(t, b)
	dst := filepath.Join(t.TempDir(), "image")
	if err := other.Get(ctx, "paused/s1/n1", string(d), dst); err != nil {
		t.Fatal(err)
	}
	sameImage(t, dst, pages)
	shared := filepath.Join(t.TempDir(), "shared")
	if err := newImages(t, b).GetShared(ctx, "paused/s1/n1", string(d), shared); err != nil {
		t.Fatal(err)
	}
	sameImage(t, shared, pages)
	if err := other.Delete(ctx, "paused/s1/n1"); err != nil {
		t.Fatal(err)
	}
	if left, err := b.List(ctx, ""); err != nil || len(left) != 0 {
		t.Fatalf("left in the store after Delete: %v %v", left, err)
	}
}

// TestArtifactImagesManifestChecks: a version 2 manifest whose file names
// leave the directory, repeat, or that a version 1 manifest carries, is
// refused before anything is fetched.
func TestArtifactImagesManifestChecks(t *testing.T) {
	b, err := artifacts.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	img := newImages(t, b)
	tree := artifacts.DigestOf([]byte("tree"))
	blob := artifacts.DigestOf([]byte("blob"))
	file := func(name string) map[string]any {
		return map[string]any{"name": name, "blob": blob, "size": 4, "mode": 0o600}
	}
	for name, man := range map[string]map[string]any{
		"dotdot":        {"version": 2, "tree": tree, "files": []any{file("..")}},
		"dotdot inside": {"version": 2, "tree": tree, "files": []any{file("a/../../b")}},
		"absolute":      {"version": 2, "tree": tree, "files": []any{file("/etc/passwd")}},
		"twice":         {"version": 2, "tree": tree, "files": []any{file("a"), file("a")}},
		"v1 files":      {"version": 1, "tree": tree, "files": []any{file("a")}},
		"v2 no files":   {"version": 2, "tree": tree},
		"setuid":        {"version": 2, "tree": tree, "files": []any{map[string]any{"name": "a", "blob": blob, "size": 4, "mode": 0o4755}}},
		"version 3":     {"version": 3, "tree": tree},
	} {
		bs, _ := json.Marshal(man)
		d := artifacts.DigestOf(bs)
		if _, err := img.St.Put(ctx, "paused/x/y", bytes.NewReader(bs), int64(len(bs)), d); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "image")
		if err := img.Get(ctx, "paused/x/y", string(d), dst); err == nil || errors.Is(err, artifacts.ErrNotFound) {
			t.Errorf("%s: %v, want the manifest refused", name, err)
		}
		if _, err := os.Lstat(dst); err == nil {
			t.Errorf("%s: dst made", name)
		}
	}
}

// TestArtifactImagesFileUnderSymlink: a version 2 manifest naming a file
// under a symlink of its tree is refused, and nothing is written where the
// symlink points.
func TestArtifactImagesFileUnderSymlink(t *testing.T) {
	b, err := artifacts.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	img := newImages(t, b)
	target := t.TempDir()
	dir := t.TempDir()
	if err := os.Symlink(target, filepath.Join(dir, "c")); err != nil {
		t.Fatal(err)
	}
	info, err := img.St.PutDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	blobFile := filepath.Join(t.TempDir(), "x")
	if err := os.WriteFile(blobFile, []byte("evil"), 0o600); err != nil {
		t.Fatal(err)
	}
	blob, err := img.PutFile(ctx, blobFile)
	if err != nil {
		t.Fatal(err)
	}
	man, _ := json.Marshal(map[string]any{"version": 2, "tree": info.Digest, "files": []any{
		map[string]any{"name": "c/pages.img", "blob": blob, "size": 4, "mode": 0o600}}})
	d := artifacts.DigestOf(man)
	if _, err := img.St.Put(ctx, "paused/x/y", bytes.NewReader(man), int64(len(man)), d); err != nil {
		t.Fatal(err)
	}
	for _, shared := range []bool{false, true} {
		get := newImages(t, b).Get
		if shared {
			get = newImages(t, b).GetShared
		}
		dst := filepath.Join(t.TempDir(), "image")
		if err := get(ctx, "paused/x/y", string(d), dst); err == nil {
			t.Fatalf("shared=%v: a file under a symlink was placed", shared)
		} else {
			t.Logf("shared=%v: %v", shared, err)
		}
		if ents, _ := os.ReadDir(target); len(ents) > 0 {
			t.Fatalf("shared=%v: written through the symlink: %v", shared, ents)
		}
		if _, err := os.Lstat(dst); err == nil {
			t.Fatalf("shared=%v: dst left", shared)
		}
	}
}
