//go:build linux

package imagebuild

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/helperenv"
)

// cloneTree makes dst a copy of the tree src in which every non-directory
// is a hard link to src's (cp -al): cheap in time and space. Files of a
// layer are never modified in place afterwards (only replaced), so sharing
// inodes with the parent layer is safe.
func cloneTree(src, dst string) error {
	if out, err := helperenv.Command(context.Background(), "cp", "-a", "-l", "--", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cloning parent layer: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// runtimeFiles are written into every sandbox by the runtime or the agent;
// they never become part of a layer.
var runtimeFiles = map[string]bool{
	"etc/hostname":                true,
	"etc/hosts":                   true,
	"etc/resolv.conf":             true,
	"usr/local/bin/airlock-envd":  true,
	"var/lib/airlock-envd":        true,
	".airlock-envd":               true,
	"usr/local/bin/.airlock-envd": true,
}

// applyUpper applies an overlayfs upper directory onto the tree dst (a
// clone of the lower): whiteouts (0/0 character devices) delete, opaque
// directories replace, everything else is copied with its owner, mode,
// times and extended attributes.
func applyUpper(upper, dst string) error {
	type dirMeta struct {
		path string
		fi   fs.FileInfo
	}
	var dirs []dirMeta
	links := map[uint64]string{} // upper inode → dst path (hard links within the upper)
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if runtimeFiles[rel] {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		target := filepath.Join(dst, rel)
		for _, x := range []string{"trusted.overlay.redirect", "trusted.overlay.metacopy"} {
			if _, err := unix.Lgetxattr(p, x, nil); err == nil {
				return fmt.Errorf("%s: overlay %s is not supported (mount overlays without redirect_dir/metacopy)", rel, x)
			}
		}
		switch {
		case fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0:
			// Whiteout: the file was deleted.
			if err := os.RemoveAll(target); err != nil {
				return fmt.Errorf("applying whiteout %s: %w", rel, err)
			}
			return nil
		case fi.IsDir():
			tfi, err := os.Lstat(target)
			switch {
			case err == nil && tfi.IsDir():
				if isOpaque(p) {
					if err := clearDir(target); err != nil {
						return err
					}
				}
			case err == nil || !errors.Is(err, fs.ErrNotExist):
				if err := os.RemoveAll(target); err != nil {
					return fmt.Errorf("replacing %s: %w", rel, err)
				}
				fallthrough
			default:
				if err := os.Mkdir(target, 0o700); err != nil {
					return fmt.Errorf("creating %s: %w", rel, err)
				}
			}
			dirs = append(dirs, dirMeta{target, fi})
			return nil
		}
		if err := os.RemoveAll(target); err != nil {
			return fmt.Errorf("replacing %s: %w", rel, err)
		}
		if st.Nlink > 1 {
			if first, ok := links[st.Ino]; ok {
				return os.Link(first, target)
			}
			links[st.Ino] = target
		}
		return copyEntry(p, target, fi)
	})
	if err != nil {
		return err
	}
	// Directory metadata last (children changed their mtimes), deepest first.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := setMeta(d.path, d.fi); err != nil {
			return err
		}
	}
	return nil
}

func isOpaque(p string) bool {
	buf := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", buf)
	return err == nil && n > 0 && buf[0] == 'y'
}

func clearDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("reading %s: %w", dir, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clearing %s: %w", dir, err)
		}
	}
	return nil
}

// copyEntry copies the non-directory src (file, symlink, device, fifo) to
// the non-existing path dst with its metadata.
func copyEntry(src, dst string, fi fs.FileInfo) error {
	switch {
	case fi.Mode().IsRegular():
		if err := copyFile(src, dst); err != nil {
			return err
		}
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("reading link %s: %w", src, err)
		}
		if err := os.Symlink(t, dst); err != nil {
			return fmt.Errorf("creating link %s: %w", dst, err)
		}
	default:
		st := fi.Sys().(*syscall.Stat_t)
		if err := unix.Mknod(dst, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("creating node %s: %w", dst, err)
		}
	}
	if err := setMeta(dst, fi); err != nil {
		return err
	}
	return copyXattrs(src, dst)
}

// copyXattrs copies the extended attributes of src to dst (after chown,
// which clears security.capability), except overlayfs' own.
func copyXattrs(src, dst string) error {
	size, err := unix.Llistxattr(src, nil)
	if err != nil || size == 0 {
		return nil // no xattrs, or a filesystem without them
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(src, buf); err != nil {
		return nil
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" || strings.HasPrefix(name, "trusted.overlay.") {
			continue
		}
		n, err := unix.Lgetxattr(src, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(src, name, val); err != nil {
			continue
		}
		if err := unix.Lsetxattr(dst, name, val[:n], 0); err != nil {
			return fmt.Errorf("setting %s on %s: %w", name, dst, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("opening %s: %w", src, err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dst, err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", dst, err)
	}
	return nil
}

// setMeta copies owner, permission bits, extended attributes (except
// overlayfs' own) and times of fi (read from the source) onto dst.
func setMeta(dst string, fi fs.FileInfo) error {
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("chown %s: %w", dst, err)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		// After chown, which clears setuid/setgid bits.
		if err := unix.Chmod(dst, st.Mode&0o7777); err != nil {
			return fmt.Errorf("chmod %s: %w", dst, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("setting times of %s: %w", dst, err)
	}
	return nil
}
