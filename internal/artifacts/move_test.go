package artifacts_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

// MoveDir takes a fetched tree out of the cache: the destination holds it,
// the cache no longer does, the next GetDir downloads it again, and a tree
// the cache does not hold is fs.ErrNotExist.
func TestMoveDir(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	b, err := artifacts.NewLocal(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := artifacts.NewStore(b, filepath.Join(dir, "cache"), nil)
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "a/f"), []byte("hello"), 0o640); err != nil {
		t.Fatal(err)
	}
	info, err := s.PutDir(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "taken")
	if err := s.MoveDir(info.Digest, dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("MoveDir of an uncached tree = %v, want ErrNotExist", err)
	}
	p, err := s.GetDir(ctx, info.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MoveDir(info.Digest, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a/f")); err != nil || string(b) != "hello" {
		t.Fatalf("moved tree: %q %v", b, err)
	}
	if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the cache still holds the moved tree: %v", err)
	}
	p2, err := s.GetDir(ctx, info.Key)
	if err != nil || p2 != p {
		t.Fatalf("GetDir after the move = %q %v", p2, err)
	}
	if b, err := os.ReadFile(filepath.Join(p2, "a/f")); err != nil || string(b) != "hello" {
		t.Fatalf("fetched again: %q %v", b, err)
	}
	if err := s.MoveDir("sha256:zz", dst); err == nil {
		t.Fatal("MoveDir of an invalid digest succeeded")
	}
}
