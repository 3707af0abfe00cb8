package artifacts_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

func newImages(t *testing.T, b artifacts.Backend) artifacts.Images {
	t.Helper()
	st, err := artifacts.NewStore(b, t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return artifacts.Images{St: st}
}

// TestArtifactImages: a directory put under a key comes back by Get (moved
// out of the cache) and by concurrent GetShared calls (linked: found in
// review, two creates from one snapshot on one node failed when the first
// moved the tree away); Delete removes the key and its tree; files by
// content.
func TestArtifactImages(t *testing.T) {
	b, err := artifacts.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	src := t.TempDir()
	data := bytes.Repeat([]byte("layer"), 1<<20)
	if err := os.WriteFile(filepath.Join(src, "disk.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	digest, err := newImages(t, b).Put(ctx, "snapshots/s1", src)
	if err != nil {
		t.Fatal(err)
	}
	other := newImages(t, b) // another node, empty cache
	var wg sync.WaitGroup
	errs := make([]error, 4)
	dsts := make([]string, 4)
	for i := range errs {
		dsts[i] = filepath.Join(t.TempDir(), "snapshot")
		wg.Go(func() { errs[i] = other.GetShared(ctx, "snapshots/s1", digest, dsts[i]) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("GetShared %d: %v", i, err)
		}
		if got, err := os.ReadFile(filepath.Join(dsts[i], "disk.img")); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GetShared %d: disk.img %d bytes, %v", i, len(got), err)
		}
	}
	dst := filepath.Join(t.TempDir(), "image")
	if err := newImages(t, b).Get(ctx, "snapshots/s1", digest, dst); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(dst, "disk.img")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get: disk.img %d bytes, %v", len(got), err)
	}

	ref, err := other.PutFile(ctx, filepath.Join(src, "disk.img"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := newImages(t, b).GetFile(ctx, ref); err != nil {
		t.Fatal(err)
	} else if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
		t.Fatalf("GetFile: %d bytes", len(got))
	}

	if err := other.Delete(ctx, "snapshots/s1"); err != nil {
		t.Fatal(err)
	}
	left, err := b.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range left {
		if o.Key != artifacts.BlobKey(artifacts.Digest(ref)) {
			t.Fatalf("left in the store after Delete: %s", o.Key)
		}
	}
	if err := other.Delete(ctx, "snapshots/s1"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
}
