package artifacts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/artifacts"
)

const (
	sparseSize = 64 << 20
	sparseData = 3 * 4096
)

// makeTree builds a directory with what root filesystems and snapshot
// directories hold: modes (setuid, sticky, read-only dirs), symlinks, a
// dangling symlink, empty dirs, a hard link, a FIFO, a sparse file, xattrs
// where the filesystem takes them, and set modification times.
func makeTree(t *testing.T, root string) (xattrs bool) {
	t.Helper()
	writeFile(t, filepath.Join(root, "etc/hostname"), []byte("airlock\n"), 0o644)
	writeFile(t, filepath.Join(root, "etc/shadow"), []byte("root:*:1::::::\n"), 0o640)
	writeFile(t, filepath.Join(root, "usr/bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	writeFile(t, filepath.Join(root, "usr/bin/suid"), []byte("suid"), 0o755)
	if err := os.Chmod(filepath.Join(root, "usr/bin/suid"), 0o4755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool-again")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("tool", filepath.Join(root, "usr/bin/rel-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/nonexistent/target", filepath.Join(root, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"empty", "var/empty/nested", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A sparse file: 64 MiB with three 4 KiB blocks of data (start, middle,
	// end).
	sp := filepath.Join(root, "disk.img")
	f, err := os.Create(sp)
	if err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte("airlock!"), 512)
	for _, off := range []int64{0, 10 << 20, sparseSize - 4096} {
		if _, err := f.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	xattrs = canXattr(filepath.Join(root, "etc/hostname"))
	if xattrs {
		if err := unix.Setxattr(filepath.Join(root, "etc/hostname"), "user.airlock.test", []byte("value\x00binary"), 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(filepath.Join(root, "var/empty"), "user.airlock.dir", []byte("d"), 0); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Logf("%s does not take user xattrs: the tree has none", root)
	}
	// Other owners, as in a root filesystem (restored when unpacking as
	// root, which CI is).
	if os.Geteuid() == 0 {
		for _, p := range []string{"etc/shadow", "usr/bin/rel-link", "var/empty"} {
			if err := os.Lchown(filepath.Join(root, p), 1234, 5678); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Read-only directory, set last (nothing can be created in it after).
	if err := os.Chmod(filepath.Join(root, "var/empty/nested"), 0o555); err != nil {
		t.Fatal(err)
	}
	// Times: a fixed nanosecond time on everything, directories included.
	mt := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	return xattrs
}

// describe lists everything that must survive a round trip, one line per
// path.
func describe(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s mode=%v uid=%d gid=%d mtime=%d", rel, fi.Mode(), st.Uid, st.Gid, fi.ModTime().UnixNano())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" size=%d sha=%x", fi.Size(), sha256.Sum256(b))
			if first, ok := inodes[st.Ino]; ok {
				line += " link=" + first
			} else {
				inodes[st.Ino] = rel
			}
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			var names []string
			buf := make([]byte, 4096)
			if n, err := unix.Llistxattr(p, buf); err == nil {
				for _, x := range strings.Split(string(buf[:n]), "\x00") {
					if strings.HasPrefix(x, "user.") {
						v := make([]byte, 256)
						m, _ := unix.Lgetxattr(p, x, v)
						names = append(names, fmt.Sprintf("%s=%q", x, v[:m]))
					}
				}
			}
			sort.Strings(names)
			if len(names) > 0 {
				line += " xattrs=" + strings.Join(names, ",")
			}
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestTreeRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := newStore(t, e.backend)
		src := filepath.Join(t.TempDir(), "rootfs")
		xattrs := makeTree(t, src)
		info, err := s.PutDir(ctx, src)
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := artifacts.KeyDigest(info.Key); !ok || d != info.Digest || !strings.HasPrefix(info.Key, "trees/sha256/") {
			t.Fatalf("PutDir stored under %s (digest %s)", info.Key, info.Digest)
		}
		// The sparse file costs its data, not its size.
		if info.Size > 1<<20 {
			t.Errorf("packed tree is %d bytes; the sparse file's holes were stored", info.Size)
		}
		// Packing is deterministic: the same tree, the same key.
		again, err := s.PutDir(ctx, src)
		if err != nil || again.Key != info.Key {
			t.Fatalf("second PutDir = %s, %v; want %s", again.Key, err, info.Key)
		}
		dir, err := s.GetDir(ctx, info.Key)
		if err != nil {
			t.Fatal(err)
		}
		want, got := describe(t, src), describe(t, dir)
		if strings.Join(want, "\n") != strings.Join(got, "\n") {
			t.Fatalf("tree differs after a round trip:\nwant\n  %s\ngot\n  %s", strings.Join(want, "\n  "), strings.Join(got, "\n  "))
		}
		if xattrs && !strings.Contains(strings.Join(got, "\n"), "user.airlock.test") {
			t.Fatal("xattrs were lost")
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, "disk.img"), &st); err != nil {
			t.Fatal(err)
		}
		if st.Size != sparseSize || st.Blocks*512 > 1<<20 {
			t.Fatalf("sparse file came back with size %d and %d bytes allocated, want %d and about %d", st.Size, st.Blocks*512, sparseSize, sparseData)
		}
	})
}
