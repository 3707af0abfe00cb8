//go:build linux

package ext4

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// FuzzReader: any image is read to the end or refused with an error;
// never a panic, an endless loop or an unbounded allocation. The seeds
// are small images from mkfs.ext4 -d (when e2fsprogs is installed) with
// bytes of their metadata flipped.
func FuzzReader(f *testing.F) {
	if _, err := exec.LookPath("mkfs.ext4"); err == nil {
		dir := f.TempDir()
		src := filepath.Join(dir, "src")
		for p, body := range map[string]string{"d/f": "hello", "d/e/g": "x", "top": "t"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
				f.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, p), []byte(body), 0o644); err != nil {
				f.Fatal(err)
			}
		}
		if err := os.Symlink("d/f", filepath.Join(src, "link")); err != nil {
			f.Fatal(err)
		}
		img := filepath.Join(dir, "img")
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-t", "ext4", "-d", src, img, "256K").CombinedOutput(); err != nil {
			f.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// The superblock, the group descriptors, the bitmaps and the
		// inode table live in the first blocks.
		for off := 1024; off < 16<<10 && off < len(b); off += 97 {
			m := bytes.Clone(b)
			m[off] ^= 0xFF
			f.Add(m)
		}
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		walkAll(img)
	})
}

// walkAll reads everything reachable in img, bounded, ignoring errors.
func walkAll(img []byte) {
	x, err := Open(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		return
	}
	visits := 0
	budget := int64(16 << 20) // bytes of file data read in all
	var walk func(ino uint32, depth int)
	walk = func(ino uint32, depth int) {
		visits++
		if visits > 10000 || depth > 64 {
			return
		}
		in, err := x.Inode(ino)
		if err != nil {
			return
		}
		_, _ = x.Xattrs(in)
		switch in.Type() {
		case TypeRegular:
			if r, err := x.Open(in); err == nil && budget > 0 {
				n, _ := io.Copy(io.Discard, io.LimitReader(r, budget))
				budget -= n
			}
		case TypeSymlink:
			_, _ = x.Readlink(in)
		case TypeDir:
			ents, err := x.ReadDir(in)
			if err != nil {
				return
			}
			for _, e := range ents {
				walk(e.Ino, depth+1)
			}
		}
	}
	walk(RootIno, 0)
}
