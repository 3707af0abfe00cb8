//go:build linux

package imagebuild

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/ext4"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// fileCap is a security.capability value (version 2, cap_net_raw).
var fileCap = []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// mkImage makes an ext4 image of src the way the microVM runtime makes a
// template's base image.
func mkImage(t *testing.T, src, img string) {
	t.Helper()
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-t", "ext4", "-d", src, img, "32M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 -d: %v: %s", err, out)
	}
}

func mountRW(t *testing.T, img, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", img, err, out)
	}
}

func umount(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Unmount(dir, 0); err != nil {
		t.Fatalf("umount %s: %v", dir, err)
	}
}

func cp(t *testing.T, src, dst string) {
	t.Helper()
	if out, err := exec.Command("cp", "--sparse=always", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
}

// The diff of an ext4 image before and after changes, applied onto the
// host tree the image was made from, gives exactly the changed tree; the
// upper directory holds only what changed.
func TestDiffTrees(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop-mounts ext4 images, whiteouts are character devices")
	}
	for _, tool := range []string{"mkfs.ext4", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s", tool)
		}
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	// Times with nanoseconds: mkfs.ext4 -d keeps whole seconds only.
	write(t, filepath.Join(src, "keep"), "keep", 0o644)
	write(t, filepath.Join(src, "change"), "old", 0o644)
	write(t, filepath.Join(src, "gone"), "gone", 0o644)
	write(t, filepath.Join(src, "gonedir/a/b"), "b", 0o644)
	write(t, filepath.Join(src, "modeonly"), "m", 0o644)
	write(t, filepath.Join(src, "owner"), "o", 0o644)
	write(t, filepath.Join(src, "xattr"), "x", 0o644)
	write(t, filepath.Join(src, "linked"), "shared", 0o644)
	write(t, filepath.Join(src, "sneaky"), "aaaa", 0o644)
	write(t, filepath.Join(src, "pair1"), "pair", 0o644)
	if err := os.Link(filepath.Join(src, "pair1"), filepath.Join(src, "pair2")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(src, "dirtofile/c"), "c", 0o644)
	write(t, filepath.Join(src, "sub/deep/keep2"), "k2", 0o600)
	if err := os.Symlink("keep", filepath.Join(src, "oldlink")); err != nil {
		t.Fatal(err)
	}
	ns := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
	for _, p := range []string{"keep", "change", "modeonly", "sub/deep/keep2"} {
		if err := os.Chtimes(filepath.Join(src, p), ns, ns); err != nil {
			t.Fatal(err)
		}
	}

	oldImg, curImg := filepath.Join(dir, "old.ext4"), filepath.Join(dir, "cur.ext4")
	mkImage(t, src, oldImg)
	cp(t, oldImg, curImg)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	mountRW(t, curImg, mnt)
	m := func(p string) string { return filepath.Join(mnt, p) }
	write(t, m("new/dir/file"), "new file", 0o640)
	write(t, m("change"), "new content", 0o644)
	// Same size, mtime put back: only the inode's ctime tells.
	sfi, err := os.Lstat(m("sneaky"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m("sneaky"), []byte("bbbb"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(m("sneaky"), sfi.ModTime(), sfi.ModTime()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"gone", "dirtofile/c"} {
		if err := os.Remove(m(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(m("gonedir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m("dirtofile")); err != nil {
		t.Fatal(err)
	}
	write(t, m("dirtofile"), "now a file", 0o644)
	if err := os.Chmod(m("modeonly"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(m("owner"), 1000, 1001); err != nil {
		t.Fatal(err)
	}
	// Binary values (NUL bytes) and a file capability cross the reader's
	// tar stream unchanged.
	if err := unix.Lsetxattr(m("xattr"), "user.airlock", []byte("v\x001"), 0); err != nil {
		t.Fatalf("setxattr: %v", err)
	}
	if err := unix.Lsetxattr(m("xattr"), "security.capability", fileCap, 0); err != nil {
		t.Fatalf("setxattr: %v", err)
	}
	if err := os.Symlink("../keep", m("sub/newlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(m("linked"), m("sub/hardlink")); err != nil {
		t.Fatal(err)
	}
	umount(t, mnt)

	upper := filepath.Join(dir, "upper")
	if err := diffImageFiles(t, oldImg, curImg, upper); err != nil {
		t.Fatalf("diffImages: %v", err)
	}
	// The reference: the kernel's view of the changed image.
	curDir := filepath.Join(dir, "cur")
	if err := os.Mkdir(curDir, 0o700); err != nil {
		t.Fatal(err)
	}
	mountRO(t, curImg, curDir)

	// The upper holds the changes only.
	for _, p := range []string{"keep", "sub/deep/keep2", "oldlink", "pair1", "pair2", "lost+found"} {
		if _, err := os.Lstat(filepath.Join(upper, p)); err == nil {
			t.Errorf("unchanged %s is in the upper directory", p)
		}
	}
	for _, p := range []string{"gone", "gonedir"} {
		fi, err := os.Lstat(filepath.Join(upper, p))
		if err != nil || fi.Mode()&fs.ModeCharDevice == 0 || fi.Sys().(*syscall.Stat_t).Rdev != 0 {
			t.Errorf("%s: want a 0/0 whiteout in the upper, got %v (err %v)", p, fi, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(upper, "gonedir/a")); err == nil {
		t.Error("the upper descends into a deleted directory")
	}

	// Applied onto the tree the image was made from, it gives the new tree.
	dst := filepath.Join(dir, "dst")
	if err := cloneTree(src, dst); err != nil {
		t.Fatal(err)
	}
	if err := applyUpper(upper, dst); err != nil {
		t.Fatalf("applyUpper: %v", err)
	}
	compareTrees(t, curDir, dst)
	st := func(p string) *syscall.Stat_t {
		fi, err := os.Lstat(filepath.Join(dst, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t)
	}
	if a, b := st("linked"), st("sub/hardlink"); a.Ino != b.Ino {
		t.Error("linked and sub/hardlink are not one inode in the result")
	}
	if s := st("keep"); s.Mtim.Nsec != 123456789 {
		t.Errorf("unchanged keep lost its nanosecond mtime (%d): it was rewritten", s.Mtim.Nsec)
	}
	if a, b := st("keep"), func() *syscall.Stat_t {
		fi, _ := os.Lstat(filepath.Join(src, "keep"))
		return fi.Sys().(*syscall.Stat_t)
	}(); a.Ino != b.Ino {
		t.Error("unchanged keep was replaced (no longer a hard link to the parent layer's file)")
	}
	if s := st("owner"); s.Uid != 1000 || s.Gid != 1001 {
		t.Errorf("owner: %d:%d, want 1000:1001", s.Uid, s.Gid)
	}
	for name, want := range map[string][]byte{"user.airlock": []byte("v\x001"), "security.capability": fileCap} {
		got := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(dst, "xattr"), name, got)
		if err != nil || !bytes.Equal(got[:n], want) {
			t.Errorf("xattr %s: %q (err %v), want %q", name, got[:max(n, 0)], err, want)
		}
	}
	if s := st("modeonly"); s.Mode&0o7777 != 0o755 {
		t.Errorf("modeonly: mode %o, want 755", s.Mode&0o7777)
	}
}

// A device node other than under /dev is refused, with a user error.
func TestDiffTreesRefusesDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates device nodes")
	}
	dir := t.TempDir()
	old, cur := filepath.Join(dir, "old"), filepath.Join(dir, "cur")
	for _, d := range []string{old, cur} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mknod(filepath.Join(cur, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	oldImg, curImg := filepath.Join(dir, "old.ext4"), filepath.Join(dir, "cur.ext4")
	mkImage(t, old, oldImg)
	mkImage(t, cur, curImg)
	err := diffImageFiles(t, oldImg, curImg, filepath.Join(dir, "upper"))
	if _, ok := sandbox.AsUserError(err); !ok || !strings.Contains(err.Error(), "/null") {
		t.Fatalf("a device node outside /dev: err = %v, want a user error naming /null", err)
	}
}

// diffImageFiles runs diffImages on two image files in this process and
// extracts its stream into upper.
func diffImageFiles(t *testing.T, oldImg, curImg, upper string) error {
	t.Helper()
	open := func(p string) *ext4.FS {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		fs, err := ext4.Open(f, fi.Size())
		if err != nil {
			t.Fatalf("ext4.Open %s: %v", p, err)
		}
		return fs
	}
	old, cur := open(oldImg), open(curImg)
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := diffImages(old, cur, tw)
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err := extractUpper(context.Background(), pr, upper)
	pr.CloseWithError(io.ErrClosedPipe)
	return err
}

func mountRO(t *testing.T, img, dir string) {
	t.Helper()
	if out, err := exec.Command("mount", "-t", "ext4", "-o", "ro,loop,noload", img, dir).CombinedOutput(); err != nil {
		t.Fatalf("mount %s: %v: %s", img, err, out)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

// xattrs lists the extended attributes of p (not following a symlink).
func xattrs(p string) ([]string, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00"), nil
}

// compareTrees checks that b has exactly a's entries with a's type, mode,
// owner, contents, symlink targets and extended attributes (times aside:
// mkfs.ext4 -d rounds them).
func compareTrees(t *testing.T, a, b string) {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(a, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(a, p)
		if rel == "lost+found" {
			return filepath.SkipDir
		}
		seen[rel] = true
		afi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		bp := filepath.Join(b, rel)
		bfi, err := os.Lstat(bp)
		if err != nil {
			t.Errorf("%s: missing in the result", rel)
			return nil
		}
		as, bs := afi.Sys().(*syscall.Stat_t), bfi.Sys().(*syscall.Stat_t)
		if rel != "." && (as.Mode != bs.Mode || as.Uid != bs.Uid || as.Gid != bs.Gid) {
			t.Errorf("%s: mode/owner %o %d:%d, want %o %d:%d", rel, bs.Mode, bs.Uid, bs.Gid, as.Mode, as.Uid, as.Gid)
		}
		switch {
		case afi.Mode().IsRegular():
			ad, _ := os.ReadFile(p)
			bd, _ := os.ReadFile(bp)
			if !bytes.Equal(ad, bd) {
				t.Errorf("%s: content %q, want %q", rel, bd, ad)
			}
		case afi.Mode()&fs.ModeSymlink != 0:
			at, _ := os.Readlink(p)
			bt, _ := os.Readlink(bp)
			if at != bt {
				t.Errorf("%s: link to %q, want %q", rel, bt, at)
			}
		}
		ax, _ := xattrs(p)
		bx, _ := xattrs(bp)
		if len(ax) != len(bx) {
			t.Errorf("%s: %d xattrs, want %d", rel, len(bx), len(ax))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(b, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(b, p)
		if !seen[rel] {
			t.Errorf("%s: in the result but not in the changed tree", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
