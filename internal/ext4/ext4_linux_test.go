//go:build linux

package ext4

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func needTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: loop-mounts the test images as the reference")
	}
	for _, tool := range []string{"mkfs.ext4", "e2fsck", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s (e2fsprogs, util-linux)", tool)
		}
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if name == "e2fsck" && errors_As(err, &ee) && ee.ExitCode() <= 2 {
			return
		}
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

func errors_As(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// populate fills the mounted file system at m through the kernel with
// every kind of entry the reader handles.
func populate(t *testing.T, m string) {
	p := func(rel string) string { return filepath.Join(m, rel) }
	must(t, os.MkdirAll(p("big/dir"), 0o755))
	// A directory large enough to get an htree index (e2fsck -D).
	for i := range 600 {
		must(t, os.WriteFile(p(fmt.Sprintf("big/dir/entry-with-a-longish-name-%04d", i)), []byte{byte(i)}, 0o644))
	}
	must(t, os.WriteFile(p("empty"), nil, 0o600))
	data := make([]byte, 3<<20+123)
	_, _ = rand.Read(data)
	must(t, os.WriteFile(p("random"), data, 0o644))
	// Sparse, with many data runs: an extent tree of depth 1 or more.
	f, err := os.Create(p("sparse"))
	must(t, err)
	for i := range 40 {
		_, err := f.WriteAt(bytes.Repeat([]byte{byte('a' + i%26)}, 5000), int64(i)*1<<20)
		must(t, err)
	}
	must(t, f.Truncate(41<<20+7))
	must(t, f.Close())
	// An unwritten (fallocated) range reads as zeros.
	f, err = os.Create(p("falloc"))
	must(t, err)
	must(t, unix.Fallocate(int(f.Fd()), 0, 0, 1<<20))
	_, err = f.WriteAt([]byte("tail"), 1<<20)
	must(t, err)
	must(t, f.Close())
	must(t, os.Symlink("short", p("fastlink")))
	must(t, os.Symlink(strings.Repeat("long/", 60)+"target", p("slowlink")))
	must(t, os.Link(p("random"), p("big/hardlink")))
	must(t, unix.Mknod(p("chr"), unix.S_IFCHR|0o620, int(unix.Mkdev(4, 64))))
	must(t, unix.Mknod(p("blk"), unix.S_IFBLK|0o660, int(unix.Mkdev(259, 70000))))
	must(t, unix.Mkfifo(p("fifo"), 0o640))
	must(t, os.WriteFile(p("owned"), []byte("x"), 0o4755))
	must(t, os.Lchown(p("owned"), 100000, 70000))
	must(t, os.Chmod(p("owned"), 0o4755))
	must(t, os.Lchown(p("fastlink"), 5, 6))
	must(t, unix.Lsetxattr(p("owned"), "user.small", []byte("v"), 0))
	must(t, unix.Lsetxattr(p("owned"), "trusted.t", []byte{0, 1, 2}, 0))
	must(t, unix.Lsetxattr(p("owned"), "security.capability",
		[]byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0))
	// Too large for the inode: goes to an xattr block.
	must(t, unix.Lsetxattr(p("random"), "user.big", bytes.Repeat([]byte("b"), 700), 0))
	must(t, unix.Lsetxattr(p("big"), "user.dir", []byte("d"), 0))
	// POSIX ACLs (getxattr form: version 2, 8-byte entries).
	acl := func(ents ...[3]uint32) []byte {
		b := binary.LittleEndian.AppendUint32(nil, 2)
		for _, e := range ents {
			b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
			b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
			b = binary.LittleEndian.AppendUint32(b, e[2])
		}
		return b
	}
	const u = 0xFFFFFFFF
	a := acl([3]uint32{1, 6, u}, [3]uint32{2, 4, 1234}, [3]uint32{4, 4, u}, [3]uint32{8, 2, 99}, [3]uint32{0x10, 6, u}, [3]uint32{0x20, 4, u})
	if err := unix.Lsetxattr(p("empty"), "system.posix_acl_access", a, 0); err != nil {
		t.Logf("no POSIX ACL in this test (setxattr: %v)", err)
	}
	ns := time.Date(2031, 2, 3, 4, 5, 6, 987654321, time.UTC)
	must(t, os.Chtimes(p("empty"), ns, ns))
	old := time.Date(1960, 1, 1, 0, 0, 0, 5, time.UTC)
	must(t, os.Chtimes(p("random"), old, old))
	late := time.Date(2100, 1, 1, 0, 0, 0, 7, time.UTC) // needs the epoch bits
	must(t, os.Chtimes(p("sparse"), late, late))
}

// TestReaderMatchesKernel builds images with mkfs.ext4 -d and then the
// kernel (every kind of entry), indexes the directories with e2fsck -D,
// and checks that the reader sees exactly what the kernel shows of the
// same image mounted read-only.
func TestReaderMatchesKernel(t *testing.T) {
	needTools(t)
	for _, v := range []struct {
		name string
		mkfs []string
	}{
		{"default", nil},
		{"128-byte-inodes", []string{"-I", "128"}},
		{"1k-blocks-32bit", []string{"-b", "1024", "-O", "^64bit"}},
	} {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			must(t, os.MkdirAll(filepath.Join(src, "from-mkfs/sub"), 0o750))
			must(t, os.WriteFile(filepath.Join(src, "from-mkfs/sub/file"), []byte("made by mkfs -d"), 0o640))
			must(t, os.Symlink("sub/file", filepath.Join(src, "from-mkfs/link")))
			img := filepath.Join(dir, "img.ext4")
			run(t, "mkfs.ext4", append(append([]string{"-q", "-F", "-t", "ext4"}, v.mkfs...), "-d", src, img, "128M")...)
			mnt := filepath.Join(dir, "mnt")
			must(t, os.Mkdir(mnt, 0o755))
			run(t, "mount", "-t", "ext4", "-o", "loop", img, mnt)
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
			populate(t, mnt)
			must(t, unix.Unmount(mnt, 0))
			run(t, "e2fsck", "-f", "-y", "-D", img)
			run(t, "mount", "-t", "ext4", "-o", "ro,loop,noload", img, mnt)
			t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })

			f, err := os.Open(img)
			must(t, err)
			defer f.Close()
			fi, err := f.Stat()
			must(t, err)
			x, err := Open(f, fi.Size())
			must(t, err)
			n := compareTree(t, x, mnt)
			// The structures meant to be covered are there.
			if in := lookup(t, x, "big/dir"); in.Flags&0x1000 == 0 {
				t.Error("big/dir has no htree index (EXT4_INDEX_FL)")
			}
			if in := lookup(t, x, "sparse"); binary.LittleEndian.Uint16(in.iblock[6:]) == 0 {
				t.Error("sparse has an extent tree of depth 0")
			}
			if in := lookup(t, x, "random"); in.fileACL == 0 {
				t.Error("random has no xattr block")
			}
			if n < 600 {
				t.Errorf("compared %d entries, want more than 600", n)
			}
		})
	}
}

// compareTree walks the image from the root and compares every entry
// with the kernel's view at mnt; it returns the number of entries.
func compareTree(t *testing.T, x *FS, mnt string) int {
	t.Helper()
	n := 0
	var walk func(rel string, ino uint32)
	walk = func(rel string, ino uint32) {
		in, err := x.Inode(ino)
		if err != nil {
			t.Fatalf("/%s: %v", rel, err)
		}
		n++
		p := filepath.Join(mnt, rel)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		if uint32(in.Mode) != st.Mode || in.UID != st.Uid || in.GID != st.Gid || in.Size != uint64(st.Size) ||
			uint64(in.Ino) != st.Ino || uint64(in.Links) != st.Nlink ||
			unix.Mkdev(in.Major, in.Minor) != st.Rdev {
			t.Errorf("/%s: reader mode %o %d:%d size %d ino %d links %d dev %d:%d; kernel mode %o %d:%d size %d ino %d links %d rdev %x",
				rel, in.Mode, in.UID, in.GID, in.Size, in.Ino, in.Links, in.Major, in.Minor,
				st.Mode, st.Uid, st.Gid, st.Size, st.Ino, st.Nlink, st.Rdev)
		}
		for _, c := range []struct {
			name string
			a    Time
			b    unix.Timespec
		}{{"mtime", in.Mtime, st.Mtim}, {"ctime", in.Ctime, st.Ctim}, {"atime", in.Atime, st.Atim}} {
			if c.a.Sec != c.b.Sec || int64(c.a.Nsec) != c.b.Nsec {
				t.Errorf("/%s: %s %d.%09d, kernel %d.%09d", rel, c.name, c.a.Sec, c.a.Nsec, c.b.Sec, c.b.Nsec)
			}
		}
		xs, err := x.Xattrs(in)
		if err != nil {
			t.Errorf("/%s: xattrs: %v", rel, err)
		}
		if want := kernelXattrs(t, p); !slices.EqualFunc(xs, want, func(a, b Xattr) bool {
			return a.Name == b.Name && bytes.Equal(a.Value, b.Value)
		}) {
			t.Errorf("/%s: xattrs %q, kernel %q", rel, xs, want)
		}
		switch in.Type() {
		case TypeRegular:
			r, err := x.Open(in)
			must(t, err)
			got, err := io.ReadAll(r)
			must(t, err)
			want, err := os.ReadFile(p)
			must(t, err)
			if !bytes.Equal(got, want) {
				t.Errorf("/%s: content differs (%d bytes read, %d in the kernel's view)", rel, len(got), len(want))
			}
		case TypeSymlink:
			got, err := x.Readlink(in)
			must(t, err)
			if want, _ := os.Readlink(p); got != want {
				t.Errorf("/%s: link %q, kernel %q", rel, got, want)
			}
		case TypeDir:
			ents, err := x.ReadDir(in)
			if err != nil {
				t.Fatalf("/%s: %v", rel, err)
			}
			kents, err := os.ReadDir(p)
			must(t, err)
			var names, knames []string
			for _, e := range ents {
				names = append(names, e.Name)
			}
			for _, e := range kents {
				knames = append(knames, e.Name())
			}
			if !slices.Equal(names, knames) {
				t.Errorf("/%s: %d entries, kernel %d", rel, len(names), len(knames))
			}
			for _, e := range ents {
				walk(path.Join(rel, e.Name), e.Ino)
			}
		}
	}
	walk(".", RootIno)
	return n
}

func kernelXattrs(t *testing.T, p string) []Xattr {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	must(t, err)
	var out []Xattr
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		v := make([]byte, 1<<16)
		n, err := unix.Lgetxattr(p, name, v)
		must(t, err)
		out = append(out, Xattr{name, v[:n]})
	}
	slices.SortFunc(out, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// lookup returns the inode at the slash-separated path rel.
func lookup(t *testing.T, x *FS, rel string) *Inode {
	t.Helper()
	in, err := x.Inode(RootIno)
	must(t, err)
	for _, name := range strings.Split(rel, "/") {
		ents, err := x.ReadDir(in)
		must(t, err)
		i := slices.IndexFunc(ents, func(e DirEntry) bool { return e.Name == name })
		if i < 0 {
			t.Fatalf("%s: no %s", rel, name)
		}
		if in, err = x.Inode(ents[i].Ino); err != nil {
			t.Fatal(err)
		}
	}
	return in
}
