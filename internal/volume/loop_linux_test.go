//go:build linux

package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func openTestLoop(t *testing.T) (*Loop, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loop volumes need root") // scripts/test.sh runs the unit tests as root
	}
	root := t.TempDir()
	l, err := OpenLoop(context.Background(), root, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	return l, root
}

// TestLoopLimitAndLifecycle: a loop volume holds at most its size (the
// writer gets ENOSPC), reports its use, cannot be hard-linked out of, is
// mounted again by OpenLoop after an unmount (host reboot), and Delete
// leaves nothing behind.
func TestLoopLimitAndLifecycle(t *testing.T) {
	l, root := openTestLoop(t)
	ctx := context.Background()
	const id = "vol1"
	if err := l.Create(ctx, id, 20<<20); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Delete(ctx, id) })
	dir, err := l.Dir(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Uid != DefaultOwner || st.Gid != DefaultOwner {
		t.Fatalf("data dir owner: %+v %v", st, err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("new volume not empty: %v", ents)
	}

	f, err := os.Create(filepath.Join(dir, "big"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{'x'}, 1<<20)
	var written int64
	for {
		n, err := f.Write(chunk)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("write error %v, want ENOSPC", err)
			}
			break
		}
		if written > 64<<20 {
			t.Fatal("wrote 64 MiB into a 20 MiB volume")
		}
	}
	f.Close()
	used, size, err := l.Usage(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %d bytes; usage %d of %d", written, used, size)
	if size > 20<<20 || size < 10<<20 || used < written || used > size {
		t.Fatalf("usage %d of %d after writing %d", used, size, written)
	}

	// A hard link across filesystems is refused.
	host := filepath.Join(root, "host-secret")
	if err := os.WriteFile(host, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(host, filepath.Join(dir, "link")); !errors.Is(err, syscall.EXDEV) {
		t.Fatalf("hard link out of the volume: %v, want EXDEV", err)
	}

	// After an unmount (a host reboot), OpenLoop mounts it again.
	os.Remove(filepath.Join(dir, "big"))
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Unmount(filepath.Join(root, id, loopMnt), 0); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenLoop(ctx, root, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "keep")); err != nil || string(b) != "kept" {
		t.Fatalf("after remount: %q %v", b, err)
	}

	if err := l2.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("volume dir left after Delete: %v", err)
	}
	if _, err := l2.Dir(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Dir after Delete: %v", err)
	}
	if err := l2.Delete(ctx, id); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
}

func TestLoopRefusesBadIDs(t *testing.T) {
	l, _ := openTestLoop(t)
	for _, id := range []string{"", "..", "a/b", "../x", ".hidden"} {
		if err := l.Create(context.Background(), id, 0); err == nil {
			t.Errorf("Create(%q) accepted", id)
		}
	}
}

// TestLoopRemountSharesAttachedDevice: when the host's mount of a volume
// is gone but the image is still mounted elsewhere (a sandbox's gofer
// keeps its own), OpenLoop mounts the same loop device again rather than
// attaching the image twice (one ext4 mounted through two devices is
// corrupted).
func TestLoopRemountSharesAttachedDevice(t *testing.T) {
	l, root := openTestLoop(t)
	ctx := context.Background()
	const id = "vol2"
	if err := l.Create(ctx, id, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Delete(ctx, id) })
	mnt := filepath.Join(root, id, loopMnt)
	other := t.TempDir()
	if err := unix.Mount(mnt, other, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) })
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	l2, err := OpenLoop(ctx, root, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := l2.Dir(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, loopData, "x"), []byte("same"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x")); err != nil || string(b) != "same" {
		t.Fatalf("the remount is another filesystem: %q %v", b, err)
	}
	n := 0
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) == filepath.Join(root, id, loopImage) {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d loop devices back the image, want 1", n)
	}
	if err := unix.Unmount(other, 0); err != nil {
		t.Fatal(err)
	}
}
