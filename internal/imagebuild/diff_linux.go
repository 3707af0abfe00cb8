//go:build linux

package imagebuild

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// diffTrees writes into upper (an empty directory) the overlayfs-style
// upper directory that turns the tree old into the tree cur: entries that
// are new or changed (with owner, mode, times, extended attributes; hard
// links as hard links), a 0/0 character device for each deleted entry
// (a deleted directory is one whiteout), and the directories leading to
// them. applyUpper reads the result.
//
// "Unchanged" is decided conservatively from lstat and must hold for
// everything: file type, permission bits, owner, size, inode number, mtime
// and ctime to the nanosecond, symlink target and extended attributes.
// old and cur are meant to be the same file system before and after a step
// (the pristine root image and the VM's disk), where an untouched file
// keeps its inode and ctime (the kernel sets ctime on every change and
// userspace cannot set it); any doubt makes the entry changed, which only
// costs a copy. New device nodes are refused outside /dev (as by the OCI
// applier) and as 0/0 (which would read as a whiteout).
func diffTrees(old, cur, upper string) error {
	d := &differ{old: old, cur: cur, upper: upper, made: map[string]bool{".": true}, groups: map[uint64]*linkGroup{}}
	if err := filepath.WalkDir(cur, d.visitCur); err != nil {
		return err
	}
	if err := d.linkGroups(); err != nil {
		return err
	}
	if err := filepath.WalkDir(old, d.visitOld); err != nil {
		return err
	}
	// Directory metadata last (their children changed their mtimes),
	// deepest first.
	slices.Reverse(d.dirs)
	for _, rel := range d.dirs {
		fi, err := os.Lstat(filepath.Join(cur, rel))
		if err != nil {
			return fmt.Errorf("reading %s: %w", rel, err)
		}
		p := filepath.Join(upper, rel)
		if err := setMeta(p, fi); err != nil {
			return err
		}
		if err := copyXattrs(filepath.Join(cur, rel), p); err != nil {
			return err
		}
	}
	return nil
}

// imageLostFound is made by mkfs.ext4 in every image (and filled by e2fsck
// with what it recovers): a file system artefact, never part of a layer.
const imageLostFound = "lost+found"

// linkGroup is the paths in cur of one multiply-linked inode.
type linkGroup struct {
	paths   []string
	changed bool
}

type differ struct {
	old, cur, upper string
	made            map[string]bool // upper directories created (rel)
	dirs            []string        // their order of creation
	groups          map[uint64]*linkGroup
	order           []uint64
}

// mkdirs creates the upper directories rel and its ancestors.
func (d *differ) mkdirs(rel string) error {
	if d.made[rel] {
		return nil
	}
	if err := d.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(d.upper, rel), 0o700); err != nil {
		return fmt.Errorf("creating %s in the layer: %w", rel, err)
	}
	d.made[rel] = true
	d.dirs = append(d.dirs, rel)
	return nil
}

func (d *differ) visitCur(p string, de fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(d.cur, p)
	if err != nil || rel == "." {
		return err
	}
	if rel == imageLostFound && de.IsDir() {
		return filepath.SkipDir
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	changed, err := differs(filepath.Join(d.old, rel), p, fi)
	if err != nil {
		return err
	}
	if t := st.Mode & unix.S_IFMT; changed && (t == unix.S_IFCHR || t == unix.S_IFBLK) &&
		(st.Rdev == 0 || !strings.HasPrefix(rel, "dev/")) {
		return userErr("the step created the device node /%s: device nodes are only supported in /dev and not as 0/0", rel)
	}
	if fi.IsDir() {
		if changed {
			return d.mkdirs(rel)
		}
		return nil
	}
	if st.Nlink > 1 {
		g := d.groups[st.Ino]
		if g == nil {
			g = &linkGroup{}
			d.groups[st.Ino] = g
			d.order = append(d.order, st.Ino)
		}
		g.paths = append(g.paths, rel)
		g.changed = g.changed || changed
		return nil
	}
	if !changed {
		return nil
	}
	return d.copy(rel, fi)
}

func (d *differ) copy(rel string, fi fs.FileInfo) error {
	if err := d.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	return copyEntry(filepath.Join(d.cur, rel), filepath.Join(d.upper, rel), fi)
}

// linkGroups adds every path of a multiply-linked inode of which one path
// changed, the first as a copy and the others as hard links to it.
func (d *differ) linkGroups() error {
	for _, ino := range d.order {
		g := d.groups[ino]
		if !g.changed {
			continue
		}
		for i, rel := range g.paths {
			if i == 0 {
				fi, err := os.Lstat(filepath.Join(d.cur, rel))
				if err != nil {
					return err
				}
				if err := d.copy(rel, fi); err != nil {
					return err
				}
				continue
			}
			if err := d.mkdirs(filepath.Dir(rel)); err != nil {
				return err
			}
			if err := os.Link(filepath.Join(d.upper, g.paths[0]), filepath.Join(d.upper, rel)); err != nil {
				return fmt.Errorf("linking %s in the layer: %w", rel, err)
			}
		}
	}
	return nil
}

// visitOld adds a whiteout for each entry of old that cur lacks.
func (d *differ) visitOld(p string, de fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(d.old, p)
	if err != nil || rel == "." {
		return err
	}
	if rel == imageLostFound && de.IsDir() {
		return filepath.SkipDir
	}
	fi, err := os.Lstat(filepath.Join(d.cur, rel))
	switch {
	case err == nil:
		if de.IsDir() && !fi.IsDir() {
			return filepath.SkipDir // replaced by a non-directory (in the upper)
		}
		return nil
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
	default:
		return err
	}
	if err := d.mkdirs(filepath.Dir(rel)); err != nil {
		return err
	}
	if err := unix.Mknod(filepath.Join(d.upper, rel), unix.S_IFCHR|0o600, 0); err != nil {
		return fmt.Errorf("creating whiteout %s: %w", rel, err)
	}
	if de.IsDir() {
		return filepath.SkipDir
	}
	return nil
}

// differs reports whether the entry cur (fi) differs from the entry at old.
func differs(old, cur string, fi fs.FileInfo) (bool, error) {
	ofi, err := os.Lstat(old)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	a, b := ofi.Sys().(*syscall.Stat_t), fi.Sys().(*syscall.Stat_t)
	if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Size != b.Size || a.Ino != b.Ino ||
		a.Rdev != b.Rdev || a.Mtim != b.Mtim || a.Ctim != b.Ctim {
		return true, nil
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		ot, err1 := os.Readlink(old)
		ct, err2 := os.Readlink(cur)
		if err1 != nil || err2 != nil || ot != ct {
			return true, nil
		}
	}
	ox, err1 := xattrs(old)
	cx, err2 := xattrs(cur)
	return err1 != nil || err2 != nil || !slices.EqualFunc(ox, cx, func(x, y [2][]byte) bool {
		return bytes.Equal(x[0], y[0]) && bytes.Equal(x[1], y[1])
	}), nil
}

// xattrs lists the extended attributes of p (not following a symlink),
// sorted by name.
func xattrs(p string) ([][2][]byte, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	names := strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00")
	slices.Sort(names)
	var out [][2][]byte
	for _, n := range names {
		if n == "" {
			continue
		}
		vs, err := unix.Lgetxattr(p, n, nil)
		if err != nil {
			return nil, err
		}
		v := make([]byte, vs)
		if vs, err = unix.Lgetxattr(p, n, v); err != nil {
			return nil, err
		}
		out = append(out, [2][]byte{[]byte(n), v[:vs]})
	}
	return out, nil
}
