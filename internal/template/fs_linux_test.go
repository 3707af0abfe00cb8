//go:build linux

package template

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestStaleTmpCleanup(t *testing.T) {
	dir := t.TempDir()
	tdir := filepath.Join(dir, "templates")
	stale := filepath.Join(tdir, ".tmp-123", "rootfs", "etc")
	trash := filepath.Join(tdir, ".trash-abc", "rootfs")
	keep := filepath.Join(tdir, "deadbeef", "rootfs")
	for _, d := range []string{stale, trash, keep} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// An interrupted root-mode mmdebstrap may leave mounts in the chroot:
	// they must be detached, and never descended into.
	mnt := filepath.Join(tdir, ".tmp-123", "rootfs", "proc")
	sentinel := filepath.Join(t.TempDir(), "sentinel")
	mounted := false
	if os.Geteuid() == 0 {
		if err := os.MkdirAll(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		mounted = true
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		if err := os.WriteFile(filepath.Join(mnt, "file"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		// A bind mount of a directory outside: its content must survive.
		outside := filepath.Dir(sentinel)
		if err := os.WriteFile(sentinel, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		bind := filepath.Join(tdir, ".tmp-123", "rootfs", "dev")
		if err := os.MkdirAll(bind, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(outside, bind, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind mount: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	}

	NewManager(dir, newFakeStore(), quietLog())

	for _, d := range []string{filepath.Join(tdir, ".tmp-123"), filepath.Join(tdir, ".trash-abc")} {
		if _, err := os.Stat(d); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed: %v", d, err)
		}
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("published template removed: %v", err)
	}
	if mounted {
		if mp, _ := mountsBelow(tdir); len(mp) != 0 {
			t.Errorf("mounts left: %v", mp)
		}
		if _, err := os.Stat(sentinel); err != nil {
			t.Errorf("removal descended into a bind mount: %v", err)
		}
	}
}
